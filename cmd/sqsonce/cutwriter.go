package main

import (
	"bytes"
	"errors"
	"io"
)

// errCutShort is what a cutWriter's writes return once it is cut.
var errCutShort = errors.New("output cut short")

// cutWriter writes to w from a goroutine of its own, so that a write that
// blocks (a pipe whose reader stopped reading) can be given up: once stop
// is closed, Write returns errCutShort at once, whether its bytes went out
// or not. A write already handed to w may still complete later; nothing
// else is written. Write is for one goroutine at a time.
type cutWriter struct {
	w      io.Writer
	stop   <-chan struct{}
	reqs   chan []byte
	dones  chan error
	exited chan struct{}
	cut    bool
}

func newCutWriter(w io.Writer, stop <-chan struct{}) *cutWriter {
	c := &cutWriter{w: w, stop: stop, reqs: make(chan []byte), dones: make(chan error, 1), exited: make(chan struct{})}
	go c.loop()
	return c
}

func (c *cutWriter) loop() {
	defer close(c.exited)
	for p := range c.reqs {
		_, err := c.w.Write(p)
		c.dones <- err
	}
}

// Write hands a copy of p to the writing goroutine and waits for it to be
// written, or for stop.
func (c *cutWriter) Write(p []byte) (int, error) {
	if c.cut {
		return 0, errCutShort
	}
	select {
	case c.reqs <- bytes.Clone(p):
	case <-c.stop:
		c.cut = true
		return 0, errCutShort
	}
	select {
	case err := <-c.dones:
		if err != nil {
			return 0, err
		}
		return len(p), nil
	case <-c.stop:
		c.cut = true
		return 0, errCutShort
	}
}

// Close ends the writing goroutine and waits for it to return, unless a
// write was given up: that goroutine then stays in its write, blocked,
// until the write completes or the process exits, which a command that
// was cut short does next.
func (c *cutWriter) Close() {
	close(c.reqs)
	if !c.cut {
		<-c.exited
	}
}
