package wire

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// MaxHeldFDs bounds the descriptors a peer may have sent that no message
// has claimed yet: a message carries at most a few (the kubelet's none),
// and every one held costs PID 1 a descriptor.
const MaxHeldFDs = 32

// FDReader reads a unix socket with recvmsg and keeps the descriptors that
// come with the bytes (SCM_RIGHTS), in order, until the message they
// belong to claims them: a sender attaches a message's descriptors to its
// first byte, so they arrive before or with it, in the order of the
// messages.
type FDReader struct {
	raw     syscall.RawConn
	oob     []byte // Read's, which one goroutine calls
	perRead int    // the descriptors oob has room for
	maxHeld int    // the descriptors held unclaimed, at most

	mu     sync.Mutex
	held   []int
	closed bool
}

// NewFDReader is an FDReader for a client of the bus: MaxHeldFDs at
// once, and held.
func NewFDReader(raw syscall.RawConn) *FDReader {
	return NewFDReaderOf(raw, MaxHeldFDs, MaxHeldFDs)
}

// NewFDReaderOf is an FDReader with room for perRead descriptors in one
// read, that holds at most maxHeld unclaimed.
func NewFDReaderOf(raw syscall.RawConn, perRead, maxHeld int) *FDReader {
	return &FDReader{raw: raw, oob: make([]byte, unix.CmsgSpace(4*perRead)), perRead: perRead, maxHeld: maxHeld}
}

func (r *FDReader) Read(p []byte) (int, error) {
	oob := r.oob
	var n, oobn, flags int
	var rerr error
	err := r.raw.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = linux.RecvmsgN(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err == nil {
		err = rerr
	}
	if oobn > 0 {
		if ferr := r.keep(oob[:oobn]); ferr != nil {
			return 0, ferr
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return 0, fmt.Errorf("%w: more descriptors at once than the %d a read takes", ErrProtocol, r.perRead)
	}
	if err != nil {
		return 0, err
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// keep adds the descriptors of a control message to those held, or closes
// them when the peer has sent too many.
func (r *FDReader) keep(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.held)+len(fds) > r.maxHeld {
		CloseFDs(fds)
		if r.closed {
			return nil
		}
		return fmt.Errorf("%w: more than %d descriptors sent and not claimed", ErrProtocol, r.maxHeld)
	}
	r.held = append(r.held, fds...)
	return nil
}

// Take hands over the descriptors message m carries (its UNIX_FDS header
// field); the caller owns them. Fewer held than m claims breaks the
// protocol.
func (r *FDReader) Take(m *dbus.Message) ([]int, error) {
	var n uint32
	if v, ok := m.Headers[dbus.FieldUnixFDs]; ok {
		n, _ = v.Value().(uint32)
	}
	return r.TakeN(n)
}

// TakeN hands over the next n descriptors held.
func (r *FDReader) TakeN(n uint32) ([]int, error) {
	if n == 0 {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if int(n) > len(r.held) {
		return nil, fmt.Errorf("%w: a message claims %d descriptors, %d came", ErrProtocol, n, len(r.held))
	}
	fds := append([]int(nil), r.held[:n]...)
	r.held = r.held[n:]
	return fds, nil
}

// Close closes what is still held; descriptors that come later are closed
// as they come.
func (r *FDReader) Close() {
	r.mu.Lock()
	held := r.held
	r.held, r.closed = nil, true
	r.mu.Unlock()
	CloseFDs(held)
}
