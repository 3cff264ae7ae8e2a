package providerutil

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
)

// fakeConn records the streams created on it; each reads what its type is given.
type fakeConn struct {
	httpstream.Connection
	read    map[string]string // stream type → what the server wrote on it
	streams []*fakeStream
}

func (c *fakeConn) CreateStream(h http.Header) (httpstream.Stream, error) {
	s := &fakeStream{Reader: strings.NewReader(c.read[h.Get(corev1.StreamType)]), headers: h.Clone()}
	c.streams = append(c.streams, s)
	return s, nil
}

type fakeStream struct {
	io.Reader
	httpstream.Stream
	headers http.Header
	closed  bool
}

func (s *fakeStream) Read(p []byte) (int, error)  { return s.Reader.Read(p) }
func (s *fakeStream) Close() error                { s.closed = true; return nil }
func (s *fakeStream) Headers() http.Header        { return s.headers }
func (s *fakeStream) Write(p []byte) (int, error) { return len(p), nil }

func TestPortForwardStreamsOpensTheErrorThenTheDataStreamOfThePort(t *testing.T) {
	for _, tc := range []struct {
		name, serverErr, wantErr string
	}{
		{name: "no error", serverErr: ""},
		{name: "the server's error", serverErr: "connection refused", wantErr: "port-forward to port 8080: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &fakeConn{read: map[string]string{corev1.StreamTypeError: tc.serverErr}}
			data, remoteErr, err := PortForwardStreams(conn, 8080)
			if err != nil {
				t.Fatal(err)
			}
			if len(conn.streams) != 2 || data != conn.streams[1] {
				t.Fatalf("%d streams opened, data is not the second", len(conn.streams))
			}
			for i, typ := range []string{corev1.StreamTypeError, corev1.StreamTypeData} {
				h := conn.streams[i].headers
				if h.Get(corev1.StreamType) != typ || h.Get(corev1.PortHeader) != "8080" || h.Get(corev1.PortForwardRequestIDHeader) != "0" {
					t.Errorf("stream %d has headers %v, want type %s, port 8080, request 0", i, h, typ)
				}
			}
			if !conn.streams[0].closed {
				t.Error("the error stream is left open for writing")
			}
			select {
			case err := <-remoteErr:
				if got := errString(err); got != tc.wantErr {
					t.Errorf("remote error %q, want %q", got, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the error stream was not read to its end")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
