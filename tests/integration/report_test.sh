#!/usr/bin/env bash
# `kiln report` of a real job (a small GEMM on a CPU worker) is one self-contained HTML file whose
# plots a browser draws: headless Chromium (Debian's chromium) renders it, its DOM after rendering
# holds the SVG marks, and its screenshot is not blank. Skipped when chromium is not installed.
. "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || skip "chromium is not installed (scripts/setup.sh installs Debian's chromium)"
start_coordinator 0
start_worker
out=$(kiln submit --op gemm --shape M=8,N=256,K=256 --chip cpu --budget 8 --wait --json \
  2>"$WORK/progress.log") || die "job did not succeed: $out"
job=$(echo "$out" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
kiln report "$job" --out "$WORK/report.html" >"$WORK/report.out" 2>&1 ||
  die "kiln report failed: $(cat "$WORK/report.out")"
grep -q "report.html" "$WORK/report.out" || die "kiln report did not say what it wrote"
if kiln report j-does-not-exist --out "$WORK/none.html" >"$WORK/none.out" 2>&1; then
  die "a report of an unknown job succeeded"; fi
[ -e "$WORK/none.html" ] && die "a failed report left a file"

# The file itself: plots, marks, nothing remote, the job's own figures.
python3 - "$WORK/report.html" "$job" <<'PY' || die "report.html check failed"
import re, sys
h = open(sys.argv[1], encoding="utf-8").read()
plots = len(re.findall(r"<svg", h))
marks = len(re.findall(r"<(path|polyline|circle|rect)\b", h))
remote = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", h, re.I)
assert plots >= 2, f"{plots} <svg> elements"
assert marks >= 20, f"{marks} marks"
assert not remote, remote
assert "<script" not in h.lower(), "a script in the report"
for want in (sys.argv[2], "Convergence", "Roofline", "Refused trials", "Provenance",
             "peak (measured)", "source hash"):
    assert want in h, f"no {want!r} in the report"
print(f"report.html: {plots} plots, {marks} marks, {len(h)} bytes")
PY

# Rendered by Chromium with no network: the DOM after layout, then a screenshot.
CHROME=("$CHROMIUM" --headless --disable-gpu --no-sandbox --disable-dev-shm-usage
  --user-data-dir="$WORK/chromium" --no-first-run --hide-scrollbars)
export HOME=$WORK
timeout 90 "${CHROME[@]}" --dump-dom "file://$WORK/report.html" >"$WORK/dom.html" 2>"$WORK/chromium-dom.log" ||
  die "chromium --dump-dom failed: $(tail -3 "$WORK/chromium-dom.log")"
python3 - "$WORK/dom.html" <<'PY' || die "the rendered DOM lacks the plots"
import re, sys
d = open(sys.argv[1], encoding="utf-8").read()
svgs = re.findall(r"<svg\b.*?</svg>", d, re.S)
assert len(svgs) >= 2, f"{len(svgs)} svg elements after rendering"
for s in svgs[:2]:
    n = len(re.findall(r"<(path|polyline|circle|rect)\b", s))
    assert n >= 5, f"an svg with {n} marks after rendering"
print(f"dom: {len(svgs)} svg elements")
PY
timeout 90 "${CHROME[@]}" --screenshot="$WORK/report.png" --window-size=1200,2000 \
  "file://$WORK/report.html" >"$WORK/chromium-shot.log" 2>&1 ||
  die "chromium --screenshot failed: $(tail -3 "$WORK/chromium-shot.log")"
[ -s "$WORK/report.png" ] || die "chromium wrote no screenshot"
# Not blank: decode the PNG with the standard library and count its colours (a blank or
# text-only page has a handful; the plots' task colours, grey grid and antialiasing add many).
python3 - "$WORK/report.png" <<'PY' || die "the screenshot looks blank"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype, _, _, interlace = ihdr
assert depth == 8 and ctype in (2, 6) and interlace == 0, ihdr
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
colours, coloured = set(), 0
for y in range(h):
    f = raw[y * (stride + 1)]
    row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
        for i in range(bpp, stride): row[i] = (row[i] + row[i - bpp]) & 255
    elif f == 2:
        row = bytearray((a + b) & 255 for a, b in zip(row, prev))
    elif f == 3:
        for i in range(stride):
            row[i] = (row[i] + ((row[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
    elif f == 4:
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = row
    if y % 2 == 0:  # every other row is plenty to count colours
        for x in range(0, stride, bpp * 2):
            px = bytes(row[x:x + 3])
            colours.add(px)
            if px != b"\xff\xff\xff": coloured += 1
print(f"screenshot {w}x{h}: {len(colours)} colours, {coloured} sampled pixels not white")
assert len(colours) >= 30, "too few colours: blank page?"
assert coloured >= 2000, "almost all white"
PY
[ -n "${KILN_REPORT_KEEP:-}" ] && cp "$WORK/report.html" "$WORK/report.png" "$KILN_REPORT_KEEP"/
echo "PASS"
