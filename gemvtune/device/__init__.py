"""The device layer: what launches compiled kernels on a GPU. A compiled variant ready to launch (``plan``, on
cuda-bindings), a cuBLASLt plan (``ltplan``, nvmath-python), the CuPy glue (``_cupy``: the only import of cupy,
``scope``), a table's tuned kernels on CuPy arrays (``dispatch``) and the element types (``elems``). Used by
``runtime`` and ``runners``; imports neither."""
