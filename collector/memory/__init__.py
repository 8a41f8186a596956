"""The collector's memory policy: glibc's allocator (:mod:`.malloc`) and Python's collector (:mod:`.heap`)."""
