// Package upstream is the pass-through of nodeinit's bus (package bus) to
// the container's own system bus: for one client connection of the bus, a
// connection to the system bus, opened when the client first needs it and
// authenticated as nodeinit, that takes what the bus sends up (the bus
// decides what: its doc has the rules) and passes down what the system bus
// sends the client. It sees the bus only through Client and Host.
//
// Calls and the client's replies and signals go up as the client sent
// them: its bytes, its byte order, its serials, so the replies that come
// down answer them as they are. Replies, errors, signals and calls come
// down as they came, their body untouched, only a destination written
// again (to the client's unique name on the bus; frame.go), the
// descriptors they carry passed on. Nothing passed through is decoded and
// encoded again: godbus writes a decoded struct back as an array of
// variants, which dbus-daemon takes for a corrupt message and answers by
// closing the connection (the kubelet's systemd cgroup driver sends
// StartTransientUnit with an a(sv); ListUnits answers an a(ssssssouso)).
//
// Anyone on the system bus may send a signal to the pass-through's unique
// name there (the stock policy allows any signal up to the bus's message
// size). So what comes down that the client did not ask for is dropped: a
// reply to no call of the client's, a signal to the pass-through alone
// that no match rule of the client's asks for (a rule's well-known sender
// matches none of these: the bus does not know who owns it up there),
// signals under a service's names or objects (a logind up there:
// org.freedesktop.login1 here is nodeinit's), and anything but a reply
// while the client's queue is full (its room for the bus's own replies is
// kept). A message larger than 244 KiB (the client's queue, less that
// room) is read through a 4 KiB buffer and dropped, its descriptors
// closed, nothing allocated for it; when it is the reply to a call of the
// client's, the call is answered with LimitsExceeded instead, so that it
// does not wait for ever. Each drop is counted; the first of a
// pass-through is logged at Info ("Dropped a message from the system bus
// for a D-Bus client"), the rest at V(2), and the count when the
// pass-through ends. A reply the client waits for waits for room in its
// queue, as long as the client reads. The queue up is bounded as a
// client's is, calls waiting for a reply at 256. An upstream that fails
// (the system bus closes the connection or goes away, a read or a write
// fails, the reader or writer panics, the queue up fills) ends the
// pass-through and closes the client's connection, so that its library
// connects again, as godbus's and go-systemd's users do (runc's systemd
// manager connects again when it finds its connection closed); its match
// rules and names up there are gone with it.
//
// Caller is the other use of the same wire code: a connection of
// nodeinit's own to a system bus (the host's, where package hostlogind
// holds its lock), that calls methods and follows the signals it filters
// for. It owns every descriptor that comes to it and keeps none it was
// not asked for: a reply's go to the call that waits for it (or are
// closed when the call has stopped waiting), every other message's are
// closed as it is read. godbus's connection cannot be that: it passes on
// only descriptors that are top-level arguments (those in a struct or a
// variant it never names) and closes none of a message it drops.
//
// Where each part is: which system bus, and where it listens (address.go);
// a connection's setup, the same for both uses: the dial, EXTERNAL, unix
// fd passing and Hello (dial_linux.go); the pass-through's connection, its
// queue up, its writer and its end (upstream_linux.go); its reader, and
// what comes down, passed on or dropped (deliver_linux.go); a message as
// it came, its header read and written again (frame.go); the Caller
// (caller_linux.go).
package upstream
