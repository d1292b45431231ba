package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
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
		return nil, fmt.Errorf("mount a %d MiB tmpfs on %s for the ledger fault phases: %w "+
			"(the campaign needs root to mount it; run it as root, as CI does)", sizeMiB, dir, err)
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
	if err == nil {
		t.mounted = false
	}
	return err
}

// fill writes a filler file until the file system is full and returns its
// path and size.
func (t *tmpfs) fill() (string, int64, error) {
	path := filepath.Join(t.dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xA5}, 64<<10)
	var n int64
	for range 1 << 16 { // bounded: 4 GiB at most
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			// Fill the last partial page too.
			for _, size := range []int{4096, 512, 1} {
				for {
					w, err := f.Write(chunk[:size])
					n += int64(w)
					if err != nil {
						break
					}
				}
			}
			return path, n, nil
		}
		if err != nil {
			return path, n, err
		}
	}
	return path, n, errors.New("file system never filled up")
}

// copySparse copies src to dst, leaving holes where src has blocks of
// zeros: bbolt's file beyond its high-water mark is such a hole, and a
// write there must need new space, as it would on a real disk.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 4096)
	zero := make([]byte, 4096)
	var off int64
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], zero[:n]) {
				if _, werr := out.WriteAt(buf[:n], off); werr != nil {
					out.Close()
					return werr
				}
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Truncate(fi.Size()); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyDurable copies src over dst through a temporary file, fsynced and
// renamed, and fsyncs the directory.
func copyDurable(src, dst string) error {
	tmp := dst + ".copy"
	if err := copySparse(src, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(dst))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
