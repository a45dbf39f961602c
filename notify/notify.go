// Package notify owns nodeinit's word to the service manager that started it
// (systemd, or `podman run --sdnotify=container`): READY=1 once the node is
// up and STOPPING=1 when shutdown begins, sent with the sd_notify protocol to
// $NOTIFY_SOCKET. Without NOTIFY_SOCKET every call does nothing; a failure to
// send is logged and never fatal, since the node runs the same either way.
//
// Only nodeinit speaks to the manager: Environ removes NOTIFY_SOCKET from the
// children's environment, so a kubelet that knows sd_notify cannot tell the
// manager the whole node is ready (or stopping) on nodeinit's behalf.
package notify

import (
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/klog/v2"
)

// socketVar is the environment variable that names the manager's socket.
const socketVar = "NOTIFY_SOCKET"

// Enabled reports whether a service manager listens, that is whether
// NOTIFY_SOCKET is set.
func Enabled() bool {
	return lookupSocket() != ""
}

func lookupSocket() string { return os.Getenv(socketVar) }

// Ready tells the manager that the node has started: READY=1.
func Ready() { send(daemon.SdNotifyReady, "ready") }

// Stopping tells the manager that shutdown has begun: STOPPING=1. It is
// called from the supervisor's loop, so it waits at most stoppingWait: a
// datagram send blocks only while the manager has stopped reading its
// socket (hundreds of messages queued), and that must not hold shutdown.
func Stopping() {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		send(daemon.SdNotifyStopping, "stopping")
	}()
	t := time.NewTimer(stoppingWait)
	defer t.Stop()
	select {
	case <-sent:
	case <-t.C:
		klog.ErrorS(nil, "The service manager does not take STOPPING=1; shutting down without waiting", "socket", lookupSocket(), "waited", stoppingWait)
	}
}

// stoppingWait bounds how long Stopping waits for its send.
const stoppingWait = 500 * time.Millisecond

func send(state, what string) {
	// NOTIFY_SOCKET stays in nodeinit's own environment (unsetEnvironment
	// false): READY=1 and STOPPING=1 are both sent over it, at different
	// times. The children do not get it (see Environ).
	sent, err := daemon.SdNotify(false, state)
	switch {
	case err != nil:
		klog.ErrorS(err, "Could not tell the service manager", "state", state, "socket", lookupSocket())
	case sent:
		klog.InfoS("Told the service manager the node is "+what, "state", state)
	}
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
