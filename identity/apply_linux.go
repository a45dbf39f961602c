package identity

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Apply keeps a generated id in the state directory and bind-mounts the
// node's ids, read-only, over /etc/machine-id (and product_uuid) under the
// plan's root. contained must say that the mount namespace is nodeinit's
// own (a private one, or a container's): a mount in the host's namespace
// would change the host's machine-id for every program on it, so without
// it nothing is mounted and Apply fails.
func (p Plan) Apply(contained bool) error {
	if p.Mount == "" && p.ProductUUIDMount == "" {
		return nil
	}
	if !contained {
		return errors.New("nodeinit shares the host's mount namespace (not PID 1 of a container, no --private-mountns): not mounting over its " + MachineIDFile)
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
