"""Web: the Streamlit app. ``pages/`` are thin pages (widgets -> plain config -> builders); the
shared glue (``session``: run configuration, URL, cached captures; ``sidebar``, ``timing``,
``guard``), the lessons' content and the example sources for the Your kernel page.

The only layer that imports streamlit. May import everything below it except ``tools``.
"""
