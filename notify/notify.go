// Package notify owns nodeinit's word to the service manager that started it
// (systemd, or `podman run --sdnotify=container`): READY=1 once the node is
// up and STOPPING=1 when shutdown begins, sent with the sd_notify protocol
// (one datagram to the unix socket $NOTIFY_SOCKET names). Without
// NOTIFY_SOCKET nothing is probed or sent; a failure to send is logged and
// never fatal, since the node runs the same either way.
//
// The Notifier is called from the PID-1 loop and never blocks it: the sends
// happen in order on one goroutine of its own, each bounded by a deadline (a
// datagram send blocks only while the manager has stopped reading its
// socket). Once STOPPING=1 is queued, READY=1 is never sent.
//
// Only nodeinit speaks to the manager: Environ removes NOTIFY_SOCKET from the
// children's environment, so a kubelet that knows sd_notify cannot tell the
// manager the whole node is ready (or stopping) on nodeinit's behalf.
package notify

import (
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// socketVar is the environment variable that names the manager's socket.
const socketVar = "NOTIFY_SOCKET"

// sendTimeout bounds one datagram send.
const sendTimeout = time.Second

// Notifier tells the service manager about the node. Its zero value is not
// usable; New makes one.
type Notifier struct {
	socket string

	mu       sync.Mutex
	stopping bool
	cancel   context.CancelFunc // ends the readiness probe
	queue    chan string        // READY=1 and STOPPING=1, at most one each
	sent     chan struct{}      // closed once the sender has nothing more to send
}

// New returns a Notifier for $NOTIFY_SOCKET; without it, every call does
// nothing.
func New() *Notifier {
	n := &Notifier{socket: os.Getenv(socketVar), cancel: func() {}, sent: make(chan struct{})}
	if n.socket == "" {
		close(n.sent)
		return n
	}
	n.queue = make(chan string, 2)
	go n.sender()
	return n
}

// Enabled reports whether a service manager listens.
func (n *Notifier) Enabled() bool { return n.socket != "" }

// ReadyWhenHealthy sends READY=1 once the node is ready: at once when p.URL
// is empty, else when p.URL first answers 200. It returns at once; the probe
// runs on a goroutine that Stopping ends. The channel returned is closed
// when the probe has ended.
func (n *Notifier) ReadyWhenHealthy(p Probe) <-chan struct{} {
	done := make(chan struct{})
	if !n.Enabled() {
		close(done)
		return done
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping {
		close(done)
		return done
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(done)
		if p.URL != "" {
			if err := p.Wait(ctx); err != nil {
				if ctx.Err() == nil {
					klog.ErrorS(err, "Readiness is never sent to the service manager")
				} else {
					klog.V(1).InfoS("Readiness probe ended by shutdown", "url", p.URL)
				}
				return
			}
		}
		n.enqueue("READY=1", false)
	}()
	return done
}

// Stopping sends STOPPING=1, after READY=1 if that was queued first, and
// makes sure READY=1 never follows. It returns at once.
func (n *Notifier) Stopping() {
	if !n.Enabled() {
		return
	}
	n.enqueue("STOPPING=1", true)
}

func (n *Notifier) enqueue(state string, stopping bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping {
		return // after STOPPING=1 nothing more, READY=1 least of all
	}
	if stopping {
		n.stopping = true
		n.cancel()
		defer close(n.queue)
	}
	n.queue <- state // never blocks: it holds room for both messages
}

// Wait waits up to d for every queued message to be sent, so that STOPPING=1
// goes out before nodeinit exits; it reports whether they were.
func (n *Notifier) Wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.sent:
		return true
	case <-t.C:
		return false
	}
}

func (n *Notifier) sender() {
	defer close(n.sent)
	for state := range n.queue {
		if err := send(n.socket, state); err != nil {
			klog.ErrorS(err, "Could not tell the service manager", "state", state, "socket", n.socket)
			continue
		}
		klog.InfoS("Told the service manager", "state", state)
	}
}

// send writes one sd_notify datagram to socket (a path, or an abstract
// socket written @name).
func send(socket, state string) error {
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return err
	}
	_, err = conn.Write([]byte(state))
	return err
}

// Environ returns env without NOTIFY_SOCKET, for the children's environment.
func Environ(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, socketVar+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
