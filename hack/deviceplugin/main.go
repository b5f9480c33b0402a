// fake-gpu-plugin: a kubelet device plugin (v1beta1) that advertises N fake Intel GPUs, so that the
// scheduling half of the GPU path (resource requests, node selection, Unschedulable) is real on a
// machine without one. Allocate hands out no device nodes: a runtime asking OpenVINO for "GPU" in
// such a pod still finds none and reports DeviceUnavailable, which is the truth.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select { // the device set never changes; keep the stream open until we stop or kubelet hangs up
	case <-p.stop:
	case <-s.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"OVSERVE_FAKE_GPU_IDS": strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// registrar answers kubelet's plugin watcher, which finds our socket in <kubelet root>/plugins_registry.
// Registering this way (rather than through the fixed /var/lib/kubelet/device-plugins/kubelet.sock) keeps
// each local cluster's plugin with its own kubelet.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	resource string
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	// Endpoint empty: kubelet dials this same socket for the DevicePlugin service.
	return &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: r.resource,
		SupportedVersions: []string{pluginapi.Version}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("kubelet registered %s", r.resource)
	} else {
		log.Printf("kubelet refused %s: %s", r.resource, s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func serve(dir, resource string, n int) (*grpc.Server, *plugin, string, error) {
	p := &plugin{stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("fake-gpu-%d", i), Health: pluginapi.Healthy})
	}
	name := "ovserve-fake-" + strings.NewReplacer("/", "-", ".", "-").Replace(resource) + ".sock"
	sock := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, "", err
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, "", err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	registerapi.RegisterRegistrationServer(srv, &registrar{resource: resource})
	go func() { _ = srv.Serve(l) }()
	return srv, p, sock, nil
}

func main() {
	n := flag.Int("devices", 2, "number of fake devices to advertise")
	resource := flag.String("resource", "gpu.intel.com/i915", "extended resource name (gpu.intel.com/i915 or gpu.intel.com/xe)")
	dir := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "kubelet's plugin watcher directory (<root-dir>/plugins_registry)")
	flag.Parse()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	for {
		srv, p, sock, err := serve(*dir, *resource, *n)
		if err != nil {
			log.Printf("%v; retrying", err)
			select {
			case <-sigs:
				return
			case <-time.After(time.Second):
			}
			continue
		}
		log.Printf("advertising %d x %s via %s", *n, *resource, sock)
		// Serve again if our socket disappears (someone cleaned the directory).
		tick := time.NewTicker(time.Second)
	watch:
		for {
			select {
			case <-sigs:
				close(p.stop)
				srv.Stop()
				_ = os.Remove(sock)
				return
			case <-tick.C:
				if _, err := os.Stat(sock); err != nil {
					log.Printf("socket gone: serving again")
					break watch
				}
			}
		}
		tick.Stop()
		close(p.stop)
		srv.Stop()
	}
}
