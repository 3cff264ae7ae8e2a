package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil/crilog"
)

// The kubelet's termination messages: what a container writes to its
// terminationMessagePath (its last 4 KiB), or with FallbackToLogsOnError and a
// failure, the end of its log (its last 80 lines, at most 2 KiB of them).
const (
	defaultTerminationMessagePath = "/dev/termination-log"
	maxTerminationMessage         = 4096
	maxTerminationLogLines        = 80
	maxTerminationLogBytes        = 2048

	// The container's terminationMessagePath and terminationMessagePolicy, kept on
	// the container so that its status reads the message as the container was
	// created (the keys the kubelet uses).
	annotationTerminationPath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationPolicy = "io.kubernetes.container.terminationMessagePolicy"
)

// terminationMessagePath is c's terminationMessagePath, with the API server's
// default for a pod that did not go through it.
func terminationMessagePath(c *corev1.Container) string {
	if c.TerminationMessagePath == "" {
		return defaultTerminationMessagePath
	}
	return c.TerminationMessagePath
}

func terminationMessagePolicy(c *corev1.Container) corev1.TerminationMessagePolicy {
	if c.TerminationMessagePolicy == "" {
		return corev1.TerminationMessageReadFile
	}
	return c.TerminationMessagePolicy
}

// terminationDir holds the termination message files of the instances of one
// container of the pod.
func (p *Provider) terminationDir(pod *corev1.Pod, container string) string {
	return filepath.Join(p.podDir(pod.UID), "containers", container)
}

// terminationMount creates the empty termination message file of instance attempt
// of c, writable by any user, and returns its mount at c's terminationMessagePath;
// nil if one of c's volumes is mounted there. Each instance has a file of its own
// (named <attempt>-<random>), so that a restart does not show the message of the
// instance before.
func (p *Provider) terminationMount(pod *corev1.Pod, c *corev1.Container, attempt uint32) (*runtimeapi.Mount, error) {
	path := terminationMessagePath(c)
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Clean(path) {
			return nil, nil
		}
	}
	dir := p.terminationDir(pod, c.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, strconv.FormatUint(uint64(attempt), 10)+"-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	f.Close()
	// 0666 whatever the umask: the container may run as any user.
	if err := os.Chmod(file, 0o666); err != nil {
		return nil, fmt.Errorf("termination message file: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: path, HostPath: file}, nil
}

// removeTerminationFiles removes the termination message files of the instances
// of the container older than attempt (and of attempt itself when through is set),
// whose containers are gone.
func (p *Provider) removeTerminationFiles(pod *corev1.Pod, container string, attempt uint32, through bool) {
	dir := p.terminationDir(pod, container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		prefix, _, _ := strings.Cut(e.Name(), "-")
		n, err := strconv.ParseUint(prefix, 10, 32)
		if err != nil {
			continue
		}
		if uint32(n) < attempt || through && uint32(n) == attempt {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				p.log.Debug("removing a termination message file", "file", e.Name(), "err", err)
			}
		}
	}
}

// addTerminationMessage appends to the status of an exited container its
// termination message, as the kubelet does: the content of its termination message
// file, or, with FallbackToLogsOnError, when that is empty and the container
// failed, the end of its log. The runtime's own message, if any, comes first.
func addTerminationMessage(ctx context.Context, st *runtimeapi.ContainerStatus) {
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	path := st.Annotations[annotationTerminationPath]
	fallback := corev1.TerminationMessagePolicy(st.Annotations[annotationTerminationPolicy]) == corev1.TerminationMessageFallbackToLogsOnError &&
		st.ExitCode != 0 && st.Reason != "ContainerCannotRun"
	var msg string
	if path != "" {
		for _, m := range st.Mounts {
			if m.ContainerPath != path {
				continue
			}
			data, err := readTail(m.HostPath, maxTerminationMessage)
			switch {
			case err == nil:
				msg = string(data)
			case !os.IsNotExist(err):
				msg, fallback = fmt.Sprintf("reading the termination message file: %v", err), false
			}
			break
		}
	}
	if msg == "" && fallback {
		msg = logTail(ctx, st.LogPath)
	}
	if msg == "" {
		return
	}
	if st.Message != "" {
		st.Message += ": "
	}
	st.Message += msg
}

// readTail returns the last max bytes of the file at path.
func readTail(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// logTail is the end of the CRI log at path: its last maxTerminationLogLines
// lines, of which the last maxTerminationLogBytes bytes.
func logTail(ctx context.Context, path string) string {
	rc, err := crilog.Open(ctx, path, provider.ContainerLogOpts{Tail: maxTerminationLogLines, TailSet: true}, false, nil)
	if err != nil {
		return fmt.Sprintf("reading the container's log for its termination message: %v", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Sprintf("reading the container's log for its termination message: %v", err)
	}
	if len(data) > maxTerminationLogBytes {
		data = data[len(data)-maxTerminationLogBytes:]
	}
	return string(data)
}
