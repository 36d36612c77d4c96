// The kubelet half: the DRA manager and the plugin manager wired as kubelet.go wires them,
// and the registration handler the plugin manager calls, recorded.

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// kubelet is the DRA half of a kubelet: its DRA manager (claim info cache checkpointed in the
// state dir, the DRA plugin manager with its gRPC clients) registered as the DRAPlugin
// handler of its plugin manager (the plugin watcher on the registry dir and the reconciler),
// wired as kubelet.go wires them. The API server is a fake clientset holding the claims.
type kubelet struct {
	client  *fake.Clientset
	manager *dra.Manager
	rec     *recorder
	stop    chan struct{}
}

func startKubelet(ctx context.Context, registryDir, stateDir, node string, offer []string, rec *recorder) (*kubelet, error) {
	client := fake.NewClientset()
	// The DRA plugin manager wipes the node's ResourceSlices at start and when a driver has
	// had no plugin for 30 s; the fake has no reaction for DeleteCollection, so record it.
	client.PrependReactor("delete-collection", "resourceslices", func(action clienttesting.Action) (bool, runtime.Object, error) {
		selector := action.(clienttesting.DeleteCollectionAction).GetListRestrictions().Fields.String()
		rec.add(event{Kind: "wipe", Selector: selector})
		return true, nil, nil
	})
	manager, err := dra.NewManager(klog.FromContext(ctx), client, stateDir)
	if err != nil {
		return nil, err
	}
	getNode := func(context.Context) (*v1.Node, error) {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, nil
	}
	// Sources never ready: the manager's reconcile loop (unprepare claims of pods no longer
	// active) stays idle, so only the script unprepares.
	notReady := config.NewSourcesReady(func(sets.Set[string]) bool { return false })
	if err := manager.Start(ctx, func() []*v1.Pod { return nil }, getNode, notReady); err != nil {
		return nil, err
	}
	plugins := pluginmanager.NewPluginManager(registryDir, &record.FakeRecorder{})
	handler := &observed{inner: manager.GetWatcherHandler(), offer: offer, rec: rec}
	plugins.AddHandler(pluginwatcherapi.DRAPlugin, handler)
	stop := make(chan struct{})
	go plugins.Run(ctx, notReady, stop)
	return &kubelet{client: client, manager: manager, rec: rec, stop: stop}, nil
}

// putClaim creates or replaces a ResourceClaim in the fake API server.
func (k *kubelet) putClaim(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	claims := k.client.ResourceV1().ResourceClaims(claim.Namespace)
	_, err := claims.Create(ctx, claim, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = claims.Update(ctx, claim, metav1.UpdateOptions{})
	}
	return err
}

// prepare runs kubelet's PrepareResources for the pod, then GetResources for each of its
// containers: the CDI device IDs kubelet hands the runtime, per container name.
func (k *kubelet) prepare(ctx context.Context, pod *v1.Pod) (map[string][]string, error) {
	if err := k.manager.PrepareResources(ctx, pod); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			info, err := k.manager.GetResources(pod, &containers[i])
			if err != nil {
				return nil, fmt.Errorf("container %s: %w", containers[i].Name, err)
			}
			ids := []string{}
			for _, device := range info.CDIDevices {
				ids = append(ids, device.Name)
			}
			out[containers[i].Name] = ids
		}
	}
	return out, nil
}

func (k *kubelet) unprepare(ctx context.Context, pod *v1.Pod) error {
	return k.manager.UnprepareResources(ctx, pod)
}

func (k *kubelet) close() {
	close(k.stop)
	k.manager.Stop()
}

// observed is the DRA manager's registration handler as the plugin manager calls it, with
// each call recorded. With offer set, the plugin's list of services is narrowed to those in
// offer before kubelet's handler sees it (a plugin that advertises only those): kubelet's
// own code still negotiates among what is left.
type observed struct {
	inner cache.PluginHandler
	offer []string
	rec   *recorder
}

func (o *observed) narrow(services []string) []string {
	if len(o.offer) == 0 {
		return services
	}
	return slices.DeleteFunc(slices.Clone(services), func(s string) bool { return !slices.Contains(o.offer, s) })
}

func (o *observed) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := o.inner.ValidatePlugin(ctx, name, endpoint, o.narrow(versions))
	if err != nil {
		o.rec.add(event{Kind: "validate-failed", Driver: name, Endpoint: endpoint, Services: versions, Error: err.Error()})
	}
	return err
}

func (o *observed) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := o.inner.RegisterPlugin(ctx, name, endpoint, o.narrow(versions), timeout)
	e := event{Kind: "register", Driver: name, Endpoint: endpoint, Services: versions}
	if err != nil {
		e.Kind, e.Error = "register-failed", err.Error()
	}
	o.rec.add(e)
	return err
}

func (o *observed) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	o.inner.DeRegisterPlugin(ctx, name, endpoint)
	o.rec.add(event{Kind: "deregister", Driver: name, Endpoint: endpoint})
}
