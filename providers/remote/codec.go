package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// ProtocolVersion is the protocol this package speaks.
const ProtocolVersion = "v1alpha1"

// protoMessage is a Kubernetes API type with its generated protobuf methods.
type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// encode writes a Kubernetes object in enc; JSON unless protobuf is asked for.
func encode(enc pb.Encoding, obj protoMessage) ([]byte, error) {
	if enc == pb.Encoding_ENCODING_PROTOBUF {
		return obj.Marshal()
	}
	return json.Marshal(obj)
}

// decode reads a Kubernetes object written in enc into obj.
func decode(enc pb.Encoding, data []byte, obj protoMessage) error {
	if enc == pb.Encoding_ENCODING_PROTOBUF {
		return obj.Unmarshal(data)
	}
	return json.Unmarshal(data, obj)
}

// podRequest is the wire form of a resolved pod.
func podRequest(enc pb.Encoding, rp *provider.ResolvedPod) (*pb.PodRequest, error) {
	data, err := encode(enc, rp.Pod)
	if err != nil {
		return nil, err
	}
	req := &pb.PodRequest{Pod: data}
	if len(rp.Env) > 0 {
		req.Env = make(map[string]*pb.EnvList, len(rp.Env))
		for name, vars := range rp.Env {
			l := &pb.EnvList{Vars: make([]*pb.EnvVar, len(vars))}
			for i, v := range vars {
				l.Vars[i] = &pb.EnvVar{Name: v.Name, Value: v.Value}
			}
			req.Env[name] = l
		}
	}
	if len(rp.Volumes) > 0 {
		req.Volumes = make(map[string]*pb.VolumeContents, len(rp.Volumes))
		for name, vc := range rp.Volumes {
			c := &pb.VolumeContents{Files: make([]*pb.VolumeFile, len(vc.Files))}
			for i, f := range vc.Files {
				c.Files[i] = &pb.VolumeFile{Path: f.Path, Data: f.Data, Mode: f.Mode}
			}
			req.Volumes[name] = c
		}
	}
	for _, c := range rp.PullCredentials {
		req.PullCredentials = append(req.PullCredentials, &pb.RegistryCredential{
			Registry: c.Registry, Username: c.Username, Password: c.Password, Auth: c.Auth, IdentityToken: c.IdentityToken})
	}
	return req, nil
}

// resolvedPod reads a resolved pod from its wire form.
func resolvedPod(enc pb.Encoding, req *pb.PodRequest) (*provider.ResolvedPod, error) {
	pod := &corev1.Pod{}
	if err := decode(enc, req.GetPod(), pod); err != nil {
		return nil, errdefs.InvalidInput("decoding the pod: %v", err)
	}
	rp := &provider.ResolvedPod{Pod: pod}
	if len(req.GetEnv()) > 0 {
		rp.Env = make(map[string][]corev1.EnvVar, len(req.GetEnv()))
		for name, l := range req.GetEnv() {
			vars := make([]corev1.EnvVar, len(l.GetVars()))
			for i, v := range l.GetVars() {
				vars[i] = corev1.EnvVar{Name: v.GetName(), Value: v.GetValue()}
			}
			rp.Env[name] = vars
		}
	}
	if len(req.GetVolumes()) > 0 {
		rp.Volumes = make(map[string]*provider.VolumeContents, len(req.GetVolumes()))
		for name, c := range req.GetVolumes() {
			vc := &provider.VolumeContents{Files: make([]provider.VolumeFile, len(c.GetFiles()))}
			for i, f := range c.GetFiles() {
				vc.Files[i] = provider.VolumeFile{Path: f.GetPath(), Data: f.GetData(), Mode: f.GetMode()}
			}
			rp.Volumes[name] = vc
		}
	}
	for _, c := range req.GetPullCredentials() {
		rp.PullCredentials = append(rp.PullCredentials, provider.RegistryCredential{
			Registry: c.GetRegistry(), Username: c.GetUsername(), Password: c.GetPassword(), Auth: c.GetAuth(), IdentityToken: c.GetIdentityToken()})
	}
	return rp, nil
}

// toStatus turns a provider's error into a gRPC status by its errdefs class.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	switch {
	case errdefs.IsNotFound(err):
		code = codes.NotFound
	case errdefs.IsInvalidInput(err):
		code = codes.InvalidArgument
	case errdefs.IsNotImplemented(err):
		code = codes.Unimplemented
	case errdefs.IsUnavailable(err):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}

// fromStatus turns a gRPC error into an error of the errdefs class its code
// stands for, with the provider's message.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		return errdefs.NotFound("%s", msg)
	case codes.InvalidArgument:
		return errdefs.InvalidInput("%s", msg)
	case codes.Unimplemented:
		return errdefs.NotImplemented("%s", msg)
	case codes.Unavailable:
		return errdefs.Unavailable("remote provider: %s", msg)
	case codes.Canceled:
		return fmt.Errorf("%s: %w", msg, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", msg, context.DeadlineExceeded)
	}
	return errors.New(msg)
}
