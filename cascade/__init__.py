"""judgeforge.cascade: Trust or Escalate (Jung et al., ICLR 2025). The local judge answers when its
own confidence clears a calibrated threshold and escalates the rest to the teacher (GPT-4).

    calibration.py  pure logic: Clopper-Pearson bounds, fixed-sequence threshold, `escalate`
    records.py      prediction records (eval's predictions.jsonl) -> local votes, confidences, teacher
    whatif.py       pure logic: offline simulation of a cascade from recorded predictions (eval report)
    config.py       CalibrateConfig
    calibrate.py    `judgeforge cascade calibrate`: calibration.json + risk-coverage plot
    store.py        the judgment store: every grading, local and teacher results, kept (SQLite) for
                    the cache and for the next round's `judgeforge data build --input store:PATH`
    backup.py       `judgeforge cascade store backup SRC DST`: a safe copy of a store in use
"""
