"""The `offhook` command: the one entry point above every package it starts.

It sits above `app/` (serve, call, settings, worker) and `ops/` (calls, simulate), so that
neither of those needs to import the other's command line.
"""
