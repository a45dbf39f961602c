package wire

import (
	"net"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Send is a peer's writer: each time wake fires, it writes every message
// pop gives, in order, each within the deadline that deadline gives just
// before it, and closes the message's descriptors once written. It
// returns nil when done closes, or the error of a write that failed.
func Send(nc *net.UnixConn, raw syscall.RawConn, wake, done <-chan struct{}, pop func() (Outgoing, bool), deadline func() time.Time) error {
	for {
		select {
		case <-wake:
		case <-done:
			return nil
		}
		for o, ok := pop(); ok; o, ok = pop() {
			err := nc.SetWriteDeadline(deadline())
			if err == nil {
				err = linux.SendAll(raw, o.Data, o.FDs)
			}
			CloseFDs(o.FDs)
			if err != nil {
				return err
			}
		}
	}
}
