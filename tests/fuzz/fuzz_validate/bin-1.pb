0

M@
N€
K€cpu 2randomJ
PACK