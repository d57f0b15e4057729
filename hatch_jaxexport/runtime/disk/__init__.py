"""Runtime room 4, disk: what the loader keeps on the user's disk.

``cache_folders`` (the cache folders, the write probe), ``entry_names`` (an entry's file
name, marking it used), ``footprint`` (the size limit and trimming), ``file_lock`` (one
non-blocking lock on every OS). It imports only the runtime's shared modules.
"""

__all__ = ["cache_folders", "entry_names", "file_lock", "footprint"]
