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
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
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

func serve(dir, resource string, n int) (*grpc.Server, *plugin, string, error) {
	p := &plugin{stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("fake-gpu-%d", i), Health: pluginapi.Healthy})
	}
	name := "ovserve-fake-" + strings.NewReplacer("/", "-", ".", "-").Replace(resource) + ".sock"
	sock := filepath.Join(dir, name)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, "", err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, nil, "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: name, ResourceName: resource,
	})
	if err != nil {
		srv.Stop()
		return nil, nil, "", fmt.Errorf("register with kubelet: %w", err)
	}
	return srv, p, sock, nil
}

func main() {
	n := flag.Int("devices", 2, "number of fake devices to advertise")
	resource := flag.String("resource", "gpu.intel.com/i915", "extended resource name (gpu.intel.com/i915 or gpu.intel.com/xe)")
	dir := flag.String("kubelet-dir", pluginapi.DevicePluginPath, "kubelet's device-plugins directory")
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
		// kubelet wipes the directory when it restarts: serve and register again when our socket disappears.
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
					log.Printf("socket gone (kubelet restarted?): re-registering")
					break watch
				}
			}
		}
		tick.Stop()
		close(p.stop)
		srv.Stop()
	}
}
