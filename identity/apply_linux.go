package identity

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/internal/bindfile"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Apply keeps a generated id in the state directory and bind-mounts the
// node's ids, read-only, over /etc/machine-id (and product_uuid) under the
// plan's root. It returns the log lines of what it did, and an error
// (errors.Join of one line per part) for each part it could not do, which
// says what the node has instead and what turns the part off: a
// product_uuid that cannot be mounted takes nothing from the machine-id.
//
// contained must say that the mount namespace is nodeinit's own (a
// private one, a container's whose PID 1 nodeinit is, or one other than
// PID 1's): a host whose root is private would otherwise get the mount in
// its own namespace, and Apply mounts nothing.
//
// Each mount goes onto exactly the file checked, never through a link
// (bindfile). The mount it lands on must not send it to peers: a shared
// one is detached from them first (a slave of its peer group: it still
// receives their mounts), and shared again, in a peer group of its own,
// once the ids are mounted. A runtime on a systemd host leaves a
// container's / shared; its peers may be the host's (nodeinit run on the
// host's root keeps the host's propagation), and the id would then change
// the host's for every program on it.
func (p Plan) Apply(contained bool) (done []adjustment.Line, err error) {
	if p.Source == Own {
		done = append(done, p.machineIDLine())
	}
	if p.MachineIDSource == "" && p.ProductUUIDSource == "" {
		return done, nil
	}
	var errs []error
	if !contained {
		why := errors.New("nodeinit may share the host's mount namespace (not PID 1 of a container, in PID 1's mount namespace, no --private-mountns)")
		if p.MachineIDSource != "" {
			errs = append(errs, p.machineIDFailed(why))
		}
		if p.ProductUUIDSource != "" {
			errs = append(errs, p.productUUIDFailed(why))
		}
		return done, errors.Join(errs...)
	}
	b := bindfile.Binder{Detach: true}
	// part mounts one file; its lines are the detaching its mount needed
	// (which stays done when the mount fails), then the mount itself.
	part := func(file string, mount func() error, ok adjustment.Line, failed func(error) error) {
		before := len(b.Detached)
		err := mount()
		for _, d := range b.Detached[before:] {
			done = append(done, Detach{Mountpoint: d.Mountpoint, PeerGroup: d.PeerGroup, For: file}.line())
		}
		if err != nil {
			errs = append(errs, failed(err))
			return
		}
		done = append(done, ok)
	}
	if p.MachineIDSource != "" {
		part(MachineIDFile, func() error { return p.mountMachineID(&b) }, p.machineIDLine(), p.machineIDFailed)
	}
	if p.ProductUUIDSource != "" {
		part(ProductUUIDFile, func() error { return p.mountProductUUID(&b) }, p.productUUIDLine(), p.productUUIDFailed)
	}
	if err := b.Close(); err != nil {
		errs = append(errs, fmt.Errorf("after mounting the node's ids: %w; it stays a slave of its old peers, and what is mounted on it later reaches no namespace copied from this one", err))
	}
	return done, errors.Join(errs...)
}

// machineIDFailed is the line for a machine-id that could not be mounted.
func (p Plan) machineIDFailed(err error) error {
	return fmt.Errorf("cannot mount the node's machine-id over %s, so the node keeps its container's %s: %w (--node-machine-id=false turns this off)",
		MachineIDFile, p.found(), err)
}

// productUUIDFailed is the line for a product_uuid that could not be
// mounted: the machine-id is another part, mounted or not on its own.
func (p Plan) productUUIDFailed(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("this machine has no %s to mount over (no DMI)", ProductUUIDFile)
	}
	return fmt.Errorf("cannot mount the node's product_uuid over %s, so the Node's systemUUID stays the machine's: %w (--node-product-uuid=false turns this off)",
		ProductUUIDFile, err)
}

// mountMachineID mounts the node's machine-id over /etc/machine-id, making
// an empty file to mount on where the container has none.
func (p Plan) mountMachineID(b *bindfile.Binder) error {
	src := filepath.Join(p.root, p.MachineIDSource)
	what, keepIt := "the node's kept machine-id", func() error { return nil }
	switch p.Source {
	case Generated:
		keepIt = func() error { return keep(src, p.MachineID) }
	case Host:
		// The copy of the host's id: rewritten when the host's changed.
		what = "the copy of the host's machine-id"
		keepIt = func() error {
			if kept, err := readID(src, linux.NoFollow); err == nil && kept == p.MachineID {
				return nil
			}
			return keep(src, p.MachineID)
		}
	}
	return p.mountID(b, MachineIDFile, true, src, p.MachineID, what, keepIt)
}

// mountProductUUID mounts the node's product_uuid over DMI's. sysfs cannot
// hold a new file: where the machine has no DMI product_uuid there is
// nothing to mount over.
func (p Plan) mountProductUUID(b *bindfile.Binder) error {
	src := filepath.Join(p.root, p.ProductUUIDSource)
	keepIt := func() error { return nil }
	if p.ProductUUIDNew {
		keepIt = func() error { return keep(src, p.ProductUUID) }
	}
	return p.mountID(b, ProductUUIDFile, false, src, p.ProductUUID, "the node's kept product_uuid", keepIt)
}

// mountID mounts the id file src, holding id, read-only over the file
// (below the root) target, made empty first where create allows and it is
// missing: the target is opened (and checked) first, then keepIt writes
// the id where it must, then src is opened and mounted.
func (p Plan) mountID(b *bindfile.Binder, target string, create bool, src, id, what string, keepIt func() error) error {
	t, err := bindfile.OpenTarget(filepath.Join(p.root, target), create, false)
	if err != nil {
		return err
	}
	if err := keepIt(); err != nil {
		t.Close()
		return err
	}
	f, err := openID(src, id, what)
	if err != nil {
		t.Close()
		return err
	}
	defer f.Close()
	return b.Over(f, t, true)
}

// openID opens the id file at path to mount it: not through a link, never
// waiting, a regular file, and holding want (read bounded). The open file
// is what gets mounted, so what was read is what the node gets.
func openID(path, want, what string) (*os.File, error) {
	fd, err := linux.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, unusable(what, path, fmt.Errorf("%w: a symbolic link", linux.ErrNotRegular), "remove it to have a new one made")
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := linux.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > idFileLimit {
		f.Close()
		return nil, fmt.Errorf("%s %s changed since it was read (now mode %#o, %d bytes): not mounting it", what, path, st.Mode&unix.S_IFMT, st.Size)
	}
	b, err := io.ReadAll(io.LimitReader(f, idFileLimit+1))
	line, _, _ := strings.Cut(string(b), "\n")
	if err != nil || strings.TrimSpace(line) != want {
		f.Close()
		return nil, fmt.Errorf("%s %s changed since it was read: not mounting it", what, path)
	}
	return f, nil
}

// keep writes id into path, whole or not at all: a temporary file made
// anew (never written through a link someone left in its place), synced,
// renamed over path, so a crash never leaves a torn id to be read on the
// next start.
func keep(path, id string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("keep the node's id: %w", err)
	}
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("keep the node's id: %w", err)
	}
	fd, err := linux.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return fmt.Errorf("keep the node's id: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.WriteString(id + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep the node's id: %w", err)
	}
	return nil
}

// planDetach finds, for --write-flags and the log, the shared mounts that
// Apply will detach from their peers: those under the files it mounts
// over (under the directory of a missing /etc/machine-id, where one is
// made to mount on). A mount listed once is not listed again.
func (p *Plan) planDetach() {
	seen := map[string]bool{}
	for _, f := range []struct {
		file string
		on   bool
	}{{MachineIDFile, p.MachineIDSource != ""}, {ProductUUIDFile, p.ProductUUIDSource != ""}} {
		if !f.on {
			continue
		}
		path := filepath.Join(p.root, f.file)
		m, err := bindfile.MountOf(path)
		if errors.Is(err, fs.ErrNotExist) {
			m, err = bindfile.MountOf(filepath.Dir(path))
		}
		if err != nil {
			continue // Apply says why
		}
		if group, shared := bindfile.Shared(m); shared && !seen[m.Mountpoint] {
			seen[m.Mountpoint] = true
			p.Detach = append(p.Detach, Detach{Mountpoint: m.Mountpoint, PeerGroup: group, For: f.file})
		}
	}
}
