package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// tmpfs is a small file system of its own for the ledger of the disk-full
// and read-only phases. Mounting needs root (CAP_SYS_ADMIN).
type tmpfs struct {
	dir     string
	mounted bool
}

func mountTmpfs(dir string, sizeMiB int) (*tmpfs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%dm,mode=0700", sizeMiB)); err != nil {
		return nil, fmt.Errorf("mount a %d MiB tmpfs on %s for the ledger's faults: %w (it needs root; run it as root, as CI does)", sizeMiB, dir, err)
	}
	return &tmpfs{dir: dir, mounted: true}, nil
}

// readOnly remounts the file system read-only or read-write. Going
// read-only fails with EBUSY while a file on it is open for writing.
func (t *tmpfs) readOnly(ro bool) error {
	flags := uintptr(syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV)
	if ro {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("tmpfs", t.dir, "tmpfs", flags, ""); err != nil {
		return fmt.Errorf("remount %s (read-only %v): %w", t.dir, ro, err)
	}
	return nil
}

func (t *tmpfs) unmount() error {
	if t == nil || !t.mounted {
		return nil
	}
	err := syscall.Unmount(t.dir, 0)
	if err != nil {
		err = syscall.Unmount(t.dir, syscall.MNT_DETACH)
	}
	t.mounted = err != nil
	return err
}

// fill writes a filler file until the file system is full (its last
// partial page too) and returns its path and size.
func (t *tmpfs) fill() (string, int64, error) {
	path := filepath.Join(t.dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xA5}, 64<<10)
	var n int64
	for _, size := range []int{len(chunk), 4096, 512, 1} {
		for {
			w, err := f.Write(chunk[:size])
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			} else if err != nil {
				return path, n, err
			}
		}
	}
	return path, n, nil
}

// copySparse copies src to dst durably (fsynced, and the directory too),
// leaving holes where src has blocks of zeros: bbolt's file beyond its
// high-water mark is such a hole, and a write there must need new space,
// as it would on a real disk.
func copySparse(src, dst string) error {
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp %s %s: %w: %s", src, dst, err, out)
	}
	for _, p := range []string{dst, filepath.Dir(dst)} {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
