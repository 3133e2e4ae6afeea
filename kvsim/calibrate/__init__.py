"""GPU calibration of the KV-read layout factor: a CuPy decode-attention microkernel (``kernel``),
its timing harness (``run``), the NumPy reference of the same maths (``reference``) and the
calibration table the cost model reads (``table``). Importing this package never imports CuPy.
"""
