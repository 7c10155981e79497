"""The resource manager's baseline decisions and the plain data types they work on.

Everything here is pure: immutable inputs, no I/O, no clock (time is passed in), so the live
resource manager and a discrete-event simulator run the very same code.
"""
