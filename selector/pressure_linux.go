package selector

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pressurePath is /proc/pressure/cpu as the kernel takes it, NUL-ended,
// so that opening it allocates nothing.
var pressurePath = []byte("/proc/pressure/cpu\x00")

// pressureBuf takes the file's text. Guarded by pressure.mu.
var pressureBuf [256]byte

// readCPUPressure reads the CPUs' stall so far from /proc/pressure/cpu.
// It keeps no descriptor open between samples, and allocates nothing.
// The caller holds pressure.mu.
func readCPUPressure() (time.Duration, bool) {
	atFDCWD := unix.AT_FDCWD
	r, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&pressurePath[0])),
		unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return 0, false
	}
	fd := int(r)
	n, err := unix.Read(fd, pressureBuf[:])
	_ = unix.Close(fd)
	if err != nil || n <= 0 {
		return 0, false
	}
	return parsePressure(pressureBuf[:n])
}
