package identity

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Apply keeps a generated id in the state directory and bind-mounts the
// node's ids, read-only, over /etc/machine-id (and product_uuid) under the
// plan's root. It mounts only where the mount cannot propagate: the mount
// it would land on must not be shared. A shared one may have peers in the
// host's mount namespace (nodeinit run on the host's root keeps the host's
// propagation), and the id would then change the host's for every program
// on it. In a container, whose root is private until --make-rshared, or
// in nodeinit's private (rslave) namespace, nothing propagates out; boot
// calls Apply before making / shared. contained must say that the mount
// namespace is nodeinit's own (a private one, a container's whose PID 1
// nodeinit is, or one other than PID 1's): a host whose root is private
// would otherwise get the mount in its own namespace.
func (p Plan) Apply(contained bool) error {
	if p.Mount == "" && p.ProductUUIDMount == "" {
		return nil
	}
	if !contained {
		return errors.New("nodeinit may share the host's mount namespace (not PID 1 of a container, in PID 1's mount namespace, no --private-mountns): not mounting over its " + MachineIDFile)
	}
	if err := unshared(filepath.Join(p.root, MachineIDFile)); err != nil {
		return err
	}
	if p.Mount != "" {
		if p.Source == Generated {
			if err := keep(filepath.Join(p.root, p.Mount), p.MachineID); err != nil {
				return err
			}
		}
		if err := bindReadOnly(filepath.Join(p.root, p.Mount), filepath.Join(p.root, MachineIDFile), true); err != nil {
			return err
		}
	}
	if p.ProductUUIDMount != "" {
		if p.ProductUUIDNew {
			if err := keep(filepath.Join(p.root, p.ProductUUIDMount), p.ProductUUID); err != nil {
				return err
			}
		}
		// sysfs cannot hold a new file: where the machine has no DMI
		// product_uuid there is nothing to mount over.
		if err := bindReadOnly(filepath.Join(p.root, p.ProductUUIDMount), filepath.Join(p.root, ProductUUIDFile), false); err != nil {
			return err
		}
	}
	return nil
}

// unshared fails when the mount that holds target is shared: a mount on
// it would propagate to its peers, which may be the host's.
func unshared(target string) error {
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fmt.Errorf("read the mounts: %w", err)
	}
	var under *mountinfo.Info
	for _, m := range mounts {
		// The last one listed on the longest prefix is the one on top.
		if strings.HasPrefix(target, strings.TrimSuffix(m.Mountpoint, "/")+"/") || target == m.Mountpoint {
			if under == nil || len(m.Mountpoint) >= len(under.Mountpoint) {
				under = m
			}
		}
	}
	if under == nil {
		return fmt.Errorf("no mount holds %s", target)
	}
	for _, o := range strings.Fields(under.Optional) {
		if strings.HasPrefix(o, "shared:") {
			return fmt.Errorf("the mount %s that holds %s is shared, so a mount on it could reach the host's: not mounting the node's id (run nodeinit in a container, or with --private-mountns)",
				under.Mountpoint, target)
		}
	}
	return nil
}

// keep writes id into path, whole or not at all (a temporary file renamed
// over it), so a crash never leaves a torn id to be read on the next start.
func keep(path, id string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("keep the node's id: %w", err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o444); err != nil {
		return fmt.Errorf("keep the node's id: %w", err)
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
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

// bindReadOnly bind-mounts source over target and makes that mount
// read-only, as systemd does with /etc/machine-id. A missing target is
// made (an empty file to mount on) when create says so.
func bindReadOnly(source, target string, create bool) error {
	if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) && create {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
		if err != nil {
			return fmt.Errorf("make a file to mount the node's id on: %w", err)
		}
		f.Close()
	}
	if err := linux.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount the node's id: %w", err)
	}
	if err := linux.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make the node's id read-only: %w", err)
	}
	return nil
}
