package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
)

// MaxAuthLine bounds one line of the authentication protocol, \r\n
// included.
const MaxAuthLine = 512

// ErrAuth ends a handshake that the specification says to end by
// disconnecting, or that went past this server's limits.
var ErrAuth = errors.New("authentication failed")

// ReadAuthLine reads one line and returns it without its line end. The
// specification ends lines with \r\n; a bare \n is taken too, as
// dbus-daemon does not but costs nothing to accept.
func ReadAuthLine(r *bufio.Reader) (string, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxAuthLine {
			return "", fmt.Errorf("%w: a line longer than %d bytes", ErrAuth, MaxAuthLine)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return "", err
		}
	}
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	return string(line), nil
}
