package ckpt

import (
	"os"
	"syscall"
)

// startWriteback asks the kernel to start writing n bytes of f at off to
// the disk without waiting for them, so that the fsync at the end of Save
// finds most of the file already written (sync_file_range).
func startWriteback(f *os.File, off, n int64) {
	_ = syscall.SyncFileRange(int(f.Fd()), off, n, 2 /* SYNC_FILE_RANGE_WRITE */)
}

// datasync flushes f's data and the metadata needed to read it back
// (fdatasync: not its times).
func datasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
