package main

import (
	"fmt"
	"os"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// inhibitShutdown does what the kubelet's graceful node shutdown does on
// the system bus that DBUS_SYSTEM_BUS_ADDRESS names: it takes a delay lock
// on shutdown, waits for PrepareForShutdown(true), "drains" for drain, and
// releases the lock; on PrepareForShutdown(false), a cancelled shutdown,
// it takes a new lock. It notes INHIBIT, PREPARE, RELEASED (as it releases
// the lock) and CANCEL in rec as it goes, like the signals it receives.
func inhibitShutdown(rec *os.File, drain time.Duration) {
	conn, err := dbus.SystemBus()
	check(err)
	logind := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
	take := func() dbus.UnixFD {
		var fd dbus.UnixFD
		check(logind.Call("org.freedesktop.login1.Manager.Inhibit", 0, "shutdown", "task", "test of graceful node shutdown", "delay").Store(&fd))
		return fd
	}
	fd := take()
	check(conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.login1.Manager"), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath("/org/freedesktop/login1")))
	signals := make(chan *dbus.Signal, 4)
	conn.Signal(signals)
	note(rec, "INHIBIT")
	go func() {
		for s := range signals {
			switch {
			case len(s.Body) != 1:
			case s.Body[0] == true && fd >= 0:
				note(rec, "PREPARE")
				time.Sleep(drain) // the pods' grace periods, in a real kubelet
				// Noted just before the close: the TERM that the close lets
				// nodeinit send can end this task before a note after it.
				note(rec, "RELEASED")
				check(unix.Close(int(fd)))
				fd = -1
			case s.Body[0] == false:
				note(rec, "CANCEL")
				fd = take()
				note(rec, "INHIBIT")
			}
		}
	}()
}

func note(rec *os.File, what string) {
	if rec != nil {
		fmt.Fprintf(rec, "%s %d\n", what, time.Now().UnixNano())
	}
}
