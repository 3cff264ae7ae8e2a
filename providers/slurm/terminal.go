package slurm

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vkubelet/vkubelet/provider"
)

// openTerminal opens a new pseudo-terminal pair: the controlling side, which
// vkubelet reads and writes, and the terminal the command gets.
func openTerminal() (ptm, pts *os.File, err error) {
	ptm, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlock
		ptm.Close()
		return nil, nil, fmt.Errorf("unlocking the terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		ptm.Close()
		return nil, nil, fmt.Errorf("naming the terminal: %w", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		return nil, nil, err
	}
	return ptm, pts, nil
}

// runInTerminal runs c on a pseudo-terminal of its own, copying the session's
// stdin to it and its output to the session's stdout, and passing on resizes.
func runInTerminal(ctx context.Context, c *exec.Cmd, attach provider.AttachIO) error {
	ptm, pts, err := openTerminal()
	if err != nil {
		return err
	}
	defer ptm.Close()
	c.Stdin, c.Stdout, c.Stderr = pts, pts, pts
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		pts.Close()
		return err
	}
	pts.Close() // the command holds it now
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-attach.Resize():
				if !ok {
					return
				}
				_ = unix.IoctlSetWinsize(int(ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Height, Col: sz.Width})
			}
		}
	}()
	if in := attach.Stdin(); in != nil {
		go func() { _, _ = io.Copy(ptm, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if out := attach.Stdout(); out != nil {
			_, _ = io.Copy(out, ptm) // ends with EIO once the command has exited
		} else {
			_, _ = io.Copy(io.Discard, ptm)
		}
	}()
	err = c.Wait()
	select { // a process the command left behind may hold the terminal open
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return execResult(err)
}
