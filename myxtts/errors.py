"""The one exception type users see as a message instead of a traceback."""


class MyXTTSError(Exception):
    """A problem the user can fix; the message is one paragraph naming the file, line or flag."""
