package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// Linux).
const userHZ = 100

// procCPU returns the user+system CPU seconds a live process has used
// itself (without its waited-for children) and with them, from
// /proc/PID/stat.
func procCPU(pid int) (own, withChildren float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces; fields after it start
	// after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unreadable", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime, stime, cutime, cstime are fields
	// 14..17, so f[11..14].
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var t [4]float64
	for k := range t {
		v, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		t[k] = float64(v) / userHZ
	}
	return t[0] + t[1], t[0] + t[1] + t[2] + t[3], nil
}

// treeCPU returns the user+system CPU seconds used by the process pid and
// its descendants: what each live one has used, itself and through the
// children it has waited for (those that ended: a server's finished
// connections). A child that ends while it is being read would be counted
// twice or not at all: the reading is repeated until no child ended
// during it.
func treeCPU(pid int) (float64, error) {
	for attempt := 0; ; attempt++ {
		total, waited, err := treeCPUOnce(pid)
		if err != nil {
			return 0, err
		}
		// A child that ended and was waited for meanwhile changes the
		// parents' count of their waited-for children.
		_, again, err := treeCPUOnce(pid)
		if err != nil {
			return 0, err
		}
		if again == waited || attempt == 10 {
			return total, nil
		}
	}
}

// treeCPUOnce reads the tree once: its CPU seconds, and the CPU seconds of
// children its processes have waited for, which a child that ends
// changes.
func treeCPUOnce(pid int) (total, waited float64, err error) {
	own, withChildren, err := procCPU(pid)
	if err != nil {
		return 0, 0, err
	}
	total, waited = withChildren, withChildren-own
	children := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		children[ppid] = append(children[ppid], child)
	}
	todo := children[pid]
	for len(todo) > 0 {
		c := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[c]...)
		if own, t, err := procCPU(c); err == nil {
			total += t
			waited += t - own
		}
	}
	return total, waited, nil
}

// machineTicks returns the busy and total CPU ticks of the machine, summed
// over all CPUs, from /proc/stat.
func machineTicks() (busy, total int64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, v := range fields[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest times are already counted in user and nice
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// listenerPID finds the process listening on 127.0.0.1:port, through the
// socket's inode in /proc/net/tcp and the processes' open files. It
// returns 0 when it cannot tell.
func listenerPID(port int) int {
	inode := ""
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr := f[1]
			j := strings.LastIndexByte(addr, ':')
			if j < 0 {
				continue
			}
			p, err := strconv.ParseInt(addr[j+1:], 16, 32)
			if err == nil && int(p) == port {
				inode = f[9]
				break
			}
		}
		if inode != "" {
			break
		}
	}
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		fds, err := os.ReadDir(filepath.Join(d, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(d, "fd", fd.Name())); err == nil && l == want {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid
			}
		}
	}
	return 0
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
