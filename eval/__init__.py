"""judgeforge.eval"""
