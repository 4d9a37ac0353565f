"""judgeforge.data"""
