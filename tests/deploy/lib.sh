# Helpers for the operations tests: the integration tests' helpers (daemons on free loopback
# ports, cleaned up on exit).
# shellcheck source=../integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
