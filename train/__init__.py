"""judgeforge.train"""
