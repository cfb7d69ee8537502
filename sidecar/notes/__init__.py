"""What a note says (pure): Markdown into chunks, links, the wiki outline, secret redaction.

Works on text only, never on the file system or a store; imports ``contracts`` and ``config``.
"""
