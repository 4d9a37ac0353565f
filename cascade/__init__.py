"""judgeforge.cascade: Trust or Escalate (Jung et al., ICLR 2025). The local judge answers when its
own confidence clears a calibrated threshold and escalates the rest to the teacher (GPT-4).

    runtime.py      the cascade behind the grading API: `Grader` (cache, local judge, teacher, store
                    write per item), the `Teacher` with its `Budget` and retried `Calls`, the `Ledger`
    config.py       CascadeConfig, TeacherConfig, StoreConfig (serve's `cascade:`/`store:`), CalibrateConfig
    calibrate.py    `judgeforge cascade calibrate`: calibration.json + risk-coverage plot
    backup.py       `judgeforge cascade store backup SRC DST`: a safe copy of a store in use

What it builds on lives in the layers below, where their other users can reach them: the certification
statistics, the offline what-if and the prediction records it reads (eval/calibration.py, whatif.py,
cascade_inputs.py: the eval report runs the what-if) and the judgment store (data/store.py: the data
builder reads it as training data).
"""
