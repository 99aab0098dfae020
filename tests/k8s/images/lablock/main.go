// Command lablock takes a lock on a file and runs a command while it holds
// it, for the end-to-end lab's lock scenarios (the lab's busybox has no
// flock applet). It opens the file read-write (created if missing), as an
// exclusive lock over NFS needs, and locks it whole:
//
//	lablock -mode flock|fcntl [-n] [-w SECONDS] FILE [COMMAND [ARG...]]
//
// -mode flock uses flock(2) (which the Linux NFS client sends to the
// server as a whole-file lock), -mode fcntl a POSIX write lock (F_SETLK /
// F_SETLKW). -n fails at once (exit 1) when another holds the lock; -w
// waits at most that long (exit 1 when it runs out); without either it
// waits as long as it takes. The command's exit code is lablock's; without
// a command it only reports whether the lock could be had.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	mode := flag.String("mode", "flock", "flock or fcntl")
	now := flag.Bool("n", false, "fail at once if the lock is held")
	wait := flag.Duration("w", 0, "wait at most this long (0: no limit)")
	flag.Parse()
	if flag.NArg() < 1 || (*mode != "flock" && *mode != "fcntl") {
		fmt.Fprintln(os.Stderr, "usage: lablock -mode flock|fcntl [-n] [-w DURATION] FILE [COMMAND [ARG...]]")
		os.Exit(2)
	}
	f, err := os.OpenFile(flag.Arg(0), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lablock:", err)
		os.Exit(2)
	}
	if err := lock(f, *mode, *now, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "lablock:", err)
		os.Exit(1)
	}
	if flag.NArg() == 1 {
		return
	}
	cmd := exec.Command(flag.Arg(1), flag.Args()[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	f.Close() // releases the lock
	if ee, ok := err.(*exec.ExitError); ok {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lablock:", err)
		os.Exit(2)
	}
}

// lock takes an exclusive lock on all of f: at once (now), or retrying
// non-blocking attempts for at most wait, or blocking (wait 0).
func lock(f *os.File, mode string, now bool, wait time.Duration) error {
	try := func(block bool) error {
		if mode == "flock" {
			how := unix.LOCK_EX
			if !block {
				how |= unix.LOCK_NB
			}
			return unix.Flock(int(f.Fd()), how)
		}
		cmd := unix.F_SETLK
		if block {
			cmd = unix.F_SETLKW
		}
		return unix.FcntlFlock(f.Fd(), cmd, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0})
	}
	switch {
	case now:
		return try(false)
	case wait == 0:
		return try(true)
	}
	deadline := time.Now().Add(wait)
	for {
		err := try(false)
		if err == nil || (err != unix.EWOULDBLOCK && err != unix.EAGAIN && err != unix.EACCES) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still held after %s: %w", wait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
