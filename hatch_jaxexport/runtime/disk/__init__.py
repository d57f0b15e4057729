"""Runtime room 4, disk: what the loader keeps on the user's disk.

``_compile_cache`` (the cache folders, the write probe), ``_entry_names`` (an entry's file
name, marking it used), ``_footprint`` (the size limit and trimming), ``_file_lock`` (one
non-blocking lock on every OS). It imports only the runtime's shared modules.
"""
