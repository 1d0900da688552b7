// Package jobfifo is the job-FIFO queue sort (thesis Algorithm 1): pods of
// the job that first asked for resources are scheduled first, a job's pods
// stay together in name order, and pod priority still comes first.
package jobfifo

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/coach/scheduler_plugins/pkg/jobs"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "CoachJobFIFO"

// Plugin sorts the scheduling queue by job arrival.
type Plugin struct {
	registry *jobs.Registry
}

var _ fwk.QueueSortPlugin = &Plugin{}

// New builds the plugin on the process's shared job registry.
func New(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return &Plugin{registry: jobs.Shared(h.SharedInformerFactory())}, nil
}

// NewWithRegistry builds the plugin on a given registry (tests).
func NewWithRegistry(r *jobs.Registry) *Plugin { return &Plugin{registry: r} }

// Name returns the plugin name.
func (p *Plugin) Name() string { return Name }

// Less orders by pod priority (higher first), then by the job's arrival,
// then job, then pod name. Non-Coach pods arrive as one-pod jobs of their own.
func (p *Plugin) Less(a, b fwk.QueuedPodInfo) bool {
	pa, pb := a.GetPodInfo().GetPod(), b.GetPodInfo().GetPod()
	if prA, prB := corev1helpers.PodPriority(pa), corev1helpers.PodPriority(pb); prA != prB {
		return prA > prB
	}
	return p.registry.Order(pa).Less(p.registry.Order(pb))
}
