#!/usr/bin/env bash
# A lab PKI for Kiln with the openssl command line: a CA, the coordinator's server certificate
# and a worker client certificate (docs/security.md).
#   scripts/gen-certs.sh DIR [HOST...]
# writes DIR/ca.pem + ca.key, server.pem + server.key (SAN DNS:localhost, IP:127.0.0.1 and
# every HOST: names as DNS, addresses as IP) and worker.pem + worker.key (client certificate,
# CN=$KILN_WORKER_CN or kiln-worker). An existing CA and server certificate in DIR are kept (the
# server's is rewritten when HOSTs are given), so running it again with KILN_WORKER_CN=lab-2
# KILN_CERT_PREFIX=lab-2 adds lab-2.pem/lab-2.key beside the others.
# Keys are mode 0600. Certificates last KILN_CERT_DAYS days (default 825).
set -euo pipefail
[ $# -ge 1 ] && [ "$1" != "-h" ] && [ "$1" != "--help" ] || {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
command -v openssl >/dev/null || { echo "gen-certs: openssl not found (apt-get install openssl)" >&2; exit 1; }
DIR=$1; shift
DAYS=${KILN_CERT_DAYS:-825}
CN=${KILN_WORKER_CN:-kiln-worker}
PREFIX=${KILN_CERT_PREFIX:-worker}
case "$CN$PREFIX" in *[!A-Za-z0-9._@-]*) echo "gen-certs: KILN_WORKER_CN/KILN_CERT_PREFIX: letters, digits, . _ @ - only" >&2; exit 2;; esac
mkdir -p "$DIR"
umask 077
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

san="DNS:localhost,IP:127.0.0.1"
for h in "$@"; do
  case "$h" in *[!A-Za-z0-9.:-]*|"") echo "gen-certs: '$h' is not a host name or address" >&2; exit 2;; esac
  if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then san+=",IP:$h"; else san+=",DNS:$h"; fi
done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

if [ ! -s "$DIR/ca.pem" ] || [ ! -s "$DIR/ca.key" ]; then
  key "$DIR/ca.key"
  openssl req -x509 -new -key "$DIR/ca.key" -sha256 -days "$DAYS" -subj "/CN=Kiln lab CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$DIR/ca.pem"
  echo "gen-certs: wrote $DIR/ca.pem and ca.key (keep ca.key offline)"
fi

# sign NAME CN EXTENSIONS: NAME.key, NAME.pem signed by the CA
sign() {
  key "$DIR/$1.key"
  openssl req -new -key "$DIR/$1.key" -subj "/CN=$2" -out "$TMP/$1.csr"
  printf '%s\n' "$3" >"$TMP/$1.ext"
  openssl x509 -req -in "$TMP/$1.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" -CAcreateserial \
    -CAserial "$TMP/ca.srl" -days "$DAYS" -sha256 -extfile "$TMP/$1.ext" -out "$DIR/$1.pem" 2>/dev/null
  chmod 644 "$DIR/$1.pem"
}

# The server certificate is kept when it exists and no HOST is given (adding a worker).
if [ ! -s "$DIR/server.pem" ] || [ ! -s "$DIR/server.key" ] || [ $# -gt 0 ]; then
  sign server kiln-coordinator "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san"
  echo "gen-certs: wrote $DIR/server.pem and server.key ($san)"
fi
sign "$PREFIX" "$CN" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
echo "gen-certs: wrote $DIR/$PREFIX.pem and $PREFIX.key (client certificate, CN=$CN)"
chmod 644 "$DIR/ca.pem"
