package mock

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/provider"
)

// runningProvider returns a provider whose pod default/web (container app, args
// "line one", "line two", "line three") started at t0, with the clock at t0+10s.
func runningProvider(t *testing.T) *Provider {
	t.Helper()
	p, clk := newTestProvider(t, Config{})
	if err := p.CreatePod(context.Background(), testPod("web", "uid-1")); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	return p
}

func TestContainerLogs(t *testing.T) {
	p := runningProvider(t)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name string
		opts provider.ContainerLogOpts
		want string
	}{
		{name: "whole log", want: "line one\nline two\nline three\n"},
		{name: "tail", opts: provider.ContainerLogOpts{Tail: 2, TailSet: true}, want: "line two\nline three\n"},
		{name: "tail zero", opts: provider.ContainerLogOpts{Tail: 0, TailSet: true}, want: ""},
		{name: "tail beyond", opts: provider.ContainerLogOpts{Tail: 10, TailSet: true}, want: "line one\nline two\nline three\n"},
		{name: "limit bytes", opts: provider.ContainerLogOpts{LimitBytes: 12}, want: "line one\nlin"},
		{
			name: "timestamps",
			opts: provider.ContainerLogOpts{Timestamps: true, Tail: 2, TailSet: true},
			want: "2025-03-14T15:09:27Z line two\n2025-03-14T15:09:28Z line three\n",
		},
		{name: "since time, inclusive", opts: provider.ContainerLogOpts{SinceTime: ptrTime(at(1))}, want: "line two\nline three\n"},
		// The clock is at 10s: the last 9 seconds start at 1s.
		{name: "since seconds", opts: provider.ContainerLogOpts{SinceSeconds: 9}, want: "line two\nline three\n"},
		{name: "later of both since", opts: provider.ContainerLogOpts{SinceSeconds: 10, SinceTime: ptrTime(at(2))}, want: "line three\n"},
		{name: "since then tail", opts: provider.ContainerLogOpts{SinceSeconds: 9, Tail: 1, TailSet: true}, want: "line three\n"},
		{name: "follow returns what there is", opts: provider.ContainerLogOpts{Follow: true, LimitBytes: 5}, want: "line "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := p.GetContainerLogs(context.Background(), "default", "web", "app", tc.opts)
			if err != nil {
				t.Fatalf("GetContainerLogs: %v", err)
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("log = %q, want %q", got, tc.want)
			}
		})
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

func TestContainerLogsUsesCommandWithoutArgs(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	pod := testPod("web", "uid-1")
	pod.Spec.Containers[0].Args = nil
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	r, err := p.GetContainerLogs(context.Background(), "default", "web", "app", provider.ContainerLogOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(r); string(got) != "sh\n-c\n" {
		t.Errorf("log = %q, want the command", got)
	}
}

func TestContainerLogsFollowWaitsForContext(t *testing.T) {
	p := runningProvider(t)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := p.GetContainerLogs(ctx, "default", "web", "app", provider.ContainerLogOpts{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	select {
	case got := <-done:
		t.Fatalf("a followed log ended before its context: %q", got)
	case <-time.After(50 * time.Millisecond): // an ended stream would end well within this
	}
	cancel()
	select {
	case got := <-done:
		if got != "line one\nline two\nline three\n" {
			t.Errorf("followed log = %q", got)
		}
	case <-time.After(waitTimeout):
		t.Fatal("a followed log did not end with its context")
	}
}

func TestContainerLogsErrors(t *testing.T) {
	p := runningProvider(t)
	pending, _ := newTestProvider(t, Config{StartDelay: Duration{Duration: time.Minute}})
	if err := pending.CreatePod(context.Background(), testPod("web", "uid-1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		p         *Provider
		pod, ctr  string
		opts      provider.ContainerLogOpts
		class     error
		mentioned string
	}{
		{name: "unknown pod", p: p, pod: "nope", ctr: "app", class: errdefs.ErrNotFound, mentioned: "default/nope"},
		{name: "unknown container", p: p, pod: "web", ctr: "nope", class: errdefs.ErrNotFound, mentioned: "default/web/nope"},
		{name: "previous", p: p, pod: "web", ctr: "app", opts: provider.ContainerLogOpts{Previous: true}, class: errdefs.ErrInvalidInput, mentioned: "previous"},
		{name: "not started", p: pending, pod: "web", ctr: "app", class: errdefs.ErrInvalidInput, mentioned: "ContainerCreating"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.p.GetContainerLogs(context.Background(), "default", tc.pod, tc.ctr, tc.opts)
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.mentioned) {
				t.Errorf("GetContainerLogs: %v, want %v mentioning %q", err, tc.class, tc.mentioned)
			}
		})
	}
}

func TestRunInContainer(t *testing.T) {
	p := runningProvider(t)
	for _, tc := range []struct {
		name     string
		cmd      []string
		stdin    string // none when empty
		tty      bool
		want     string
		wantCode int
	}{
		{name: "echo", cmd: []string{"echo", "hello", "world"}, want: "echo hello world\n"},
		{name: "stdin", cmd: []string{"cat"}, stdin: "a\nb\n", want: "cat\na\nb\n"},
		{name: "tty", cmd: []string{"sh"}, stdin: "ls\n", tty: true, want: "sh\nls\n"},
		{name: "exit", cmd: []string{"exit", "3"}, want: "exit 3\n", wantCode: 3},
		{name: "exit zero", cmd: []string{"exit", "0"}, want: "exit 0\n"},
		{name: "sh -c exit", cmd: []string{"sh", "-c", "exit 42"}, want: "sh -c exit 42\n", wantCode: 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &testenv.Buffer{}
			attach := &fakeAttach{stdout: out, tty: tc.tty, resize: make(chan provider.TermSize)}
			if tc.stdin != "" {
				attach.stdin = strings.NewReader(tc.stdin)
			}
			err := p.RunInContainer(context.Background(), "default", "web", "app", tc.cmd, attach)
			var exitErr *provider.ExecError
			switch {
			case tc.wantCode == 0 && err != nil:
				t.Errorf("RunInContainer: %v", err)
			case tc.wantCode != 0 && (!errors.As(err, &exitErr) || exitErr.ExitCode != tc.wantCode):
				t.Errorf("RunInContainer: %v, want exit code %d", err, tc.wantCode)
			}
			if out.String() != tc.want {
				t.Errorf("stdout = %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestRunInContainerEndsWithContext(t *testing.T) {
	p := runningProvider(t)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.RunInContainer(ctx, "default", "web", "app", []string{"cat"}, &fakeAttach{stdin: stdinR, stdout: &testenv.Buffer{}})
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RunInContainer: %v, want context.Canceled", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("RunInContainer did not return when its context ended")
	}
}

func TestRunInContainerErrors(t *testing.T) {
	p := runningProvider(t)
	ctx := context.Background()
	if err := p.RunInContainer(ctx, "default", "web", "nope", []string{"ls"}, &fakeAttach{}); !errdefs.IsNotFound(err) {
		t.Errorf("unknown container: %v, want NotFound", err)
	}
	if err := p.RunInContainer(ctx, "default", "nope", "app", []string{"ls"}, &fakeAttach{}); !errdefs.IsNotFound(err) {
		t.Errorf("unknown pod: %v, want NotFound", err)
	}
	if err := p.RunInContainer(ctx, "default", "web", "app", nil, &fakeAttach{}); !errdefs.IsInvalidInput(err) {
		t.Errorf("empty command: %v, want InvalidInput", err)
	}
}

func TestAttachToContainerEchoesStdin(t *testing.T) {
	p := runningProvider(t)
	out := &testenv.Buffer{}
	err := p.AttachToContainer(context.Background(), "default", "web", "app", &fakeAttach{stdin: strings.NewReader("hi\n"), stdout: out})
	if err != nil {
		t.Fatalf("AttachToContainer: %v", err)
	}
	if out.String() != "hi\n" {
		t.Errorf("stdout = %q, want the stdin", out.String())
	}

	// Without stdin, it lasts as long as the context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.AttachToContainer(ctx, "default", "web", "app", &fakeAttach{stdout: out}); err != nil {
		t.Errorf("AttachToContainer with an ended context: %v", err)
	}
}

func TestPortForwardEchoes(t *testing.T) {
	p := runningProvider(t)
	client, server := net.Pipe()
	defer client.Close()
	done := make(chan error, 1)
	go func() { done <- p.PortForward(context.Background(), "default", "web", 8080, server) }()

	for _, msg := range []string{"hello", "port-forward"} {
		if err := client.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write([]byte(msg)); err != nil {
			t.Fatalf("write: %v", err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatalf("read: %v", err)
		}
		if string(got) != msg {
			t.Errorf("echo = %q, want %q", got, msg)
		}
	}
	client.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("PortForward after the peer closed: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("PortForward did not return when the stream closed")
	}
}

func TestPortForwardErrors(t *testing.T) {
	p := runningProvider(t)
	ctx := context.Background()
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	if err := p.PortForward(ctx, "default", "nope", 80, server); !errdefs.IsNotFound(err) {
		t.Errorf("unknown pod: %v, want NotFound", err)
	}
	if err := p.PortForward(ctx, "default", "web", 0, server); !errdefs.IsInvalidInput(err) {
		t.Errorf("port 0: %v, want InvalidInput", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.PortForward(cancelled, "default", "web", 80, server); err != nil {
		t.Errorf("PortForward with an ended context: %v", err)
	}
}
