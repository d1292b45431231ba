package worker

import (
	"os"
	"syscall"
)

// execPipeBody is the largest body execFilledPipe takes: a pipe holds at
// least a page on Linux, so writing that much into a new one never waits.
const execPipeBody = 4096

// execFilledPipe returns the read end of a new pipe that holds body and
// whose write end is closed, or nil when body is longer than execPipeBody
// or the pipe cannot be made. Its descriptors are blocking and never in
// the runtime's poller: the write cannot block, and the command reads the
// other end.
func execFilledPipe(body []byte) *os.File {
	if len(body) > execPipeBody {
		return nil
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil
	}
	for b := body; len(b) > 0; {
		n, err := syscall.Write(p[1], b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			syscall.Close(p[0])
			syscall.Close(p[1])
			return nil
		}
		b = b[n:]
	}
	if err := syscall.Close(p[1]); err != nil {
		syscall.Close(p[0])
		return nil
	}
	return os.NewFile(uintptr(p[0]), "|0")
}
