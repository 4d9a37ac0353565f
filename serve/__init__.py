"""judgeforge.serve"""
