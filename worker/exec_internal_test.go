//go:build linux

package worker

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A command that exits 0 just as its context ends has done its work: when
// its exit is known (it waits to be reaped), the stop must not count, or
// the operation would run again.
func TestExecStop_ExitedBeforeStop(t *testing.T) {
	t.Parallel()
	path, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess(path, []string{"true"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if state, _, ok := execProcStat(strconv.Itoa(p.Pid)); ok && state == "Z" {
			break // exited, not reaped yet: as when the context ends at that instant
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not exit within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	var s execStop
	if err := s.terminate(p); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("terminate = %v, want os.ErrProcessDone", err)
	}
	if s.at.Load() != nil {
		t.Error("a command that had exited on its own counts as stopped: its work would run again")
	}
	state, err := p.Wait()
	if err != nil || state.ExitCode() != 0 {
		t.Errorf("exit: %v, %v", state, err)
	}
}
