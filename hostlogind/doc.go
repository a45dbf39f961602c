// Package hostlogind is nodeinit's client of the host's systemd-logind:
// it holds a shutdown delay lock there for the node, so that the host's
// own shutdown (systemctl reboot, shutdown -h, the power button) waits
// for the node to drain, as it waits for a kubelet that runs on the host.
// Package logind is the other side: the logind that nodeinit serves the
// kubelet in the container, which never hears of the host's, and whose
// names (logind.BusName, ObjectPath, ManagerIface) the host's logind has.
//
// Where the container has the host's system bus (the host's /run mounted,
// so that /run/dbus/system_bus_socket is the host's; bus/upstream.Address
// finds it), Start connects there, as nodeinit, with bus/upstream's
// Caller, and:
//
//  1. adds match rules for logind's PrepareForShutdown and for
//     NameOwnerChanged of org.freedesktop.login1;
//  2. asks logind for its owner (GetNameOwner), reads whether the host is
//     shutting down already (PreparingForShutdown: then it takes no lock,
//     which would only delay that shutdown, and delivers true) and its
//     InhibitDelayMaxUSec (Delay), and calls
//     Inhibit("shutdown", "nodeinit", "drain the node's pods", "delay"),
//     keeping the descriptor it gets (unix fd passing);
//  3. delivers the host's PrepareForShutdown(true) on Shutdown, with Delay
//     read again then (a reload of logind's configuration changes it); the
//     lock is kept until Release, which the caller calls once the node has
//     drained (or it stops waiting): closing the descriptor lets the host
//     go on. Each event is delivered once the one before was received, and
//     the lock moves to Release's before true is: a Release answers the
//     last true received, never a later shutdown;
//  4. on PrepareForShutdown(false), a cancelled shutdown, takes a new lock,
//     then lets the one held for the cancelled shutdown go, and delivers
//     false;
//  5. when logind gets a new owner (systemctl restart systemd-logind),
//     takes a new lock and then closes the old one: a logind that kept the
//     old lock across its restart (systemd's does, through its FIFO in
//     /run/systemd/inhibit) is held by one lock, and one that did not is
//     held again. After a new owner or a new connection it reads
//     PreparingForShutdown again, and acts on what it missed: a shutdown
//     under way is delivered, and one cancelled meanwhile takes the lock
//     again and is delivered as cancelled.
//
// A lock the host's logind refuses or does not answer for, or a failed
// GetNameOwner, is asked for again after 1 s, doubling to 30 s; the first
// failure is logged at Info, the next at V(2). No logind on the bus is
// logged once; its arrival (NameOwnerChanged) brings the lock. A lost connection closes the lock (nobody would hear
// the shutdown it delays) and is made again on the same schedule. Every connect
// and call is bounded (Options.Timeout); Start, Shutdown, Delay, Release
// and Close return at once, so a host bus that accepts the connection and
// never answers delays neither the node's start nor its stop. The one
// goroutine recovers from a panic by ending its connection, logged with
// its stack, and connects again. Signals are taken only from who may send
// them: PrepareForShutdown from logind's unique name, on its path;
// NameOwnerChanged from the bus; anything else is dropped unread and
// unlogged (counted, at V(2) when the connection ends). Anyone on the
// host's bus may send nodeinit's connection a signal with descriptors:
// the Caller closes every descriptor but the lock's, whatever the message
// (signals, calls, replies that come after their call's timeout: a late
// Inhibit's lock is closed at once, never left delaying the host), and
// hands signals over through a queue of 16 that never blocks its reader.
//
// client.go is the Client: what its caller sees, the locks it holds and
// how one replaces another, and the events it delivers; session.go follows
// the host's logind on a connection made again while it fails.
package hostlogind
