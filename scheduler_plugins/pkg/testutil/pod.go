// Package testutil builds pods for the plugins' tests.
package testutil

import (
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/coach/scheduler_plugins/pkg/jobs"
)

// PodWrapper builds a pod with chained calls.
type PodWrapper struct{ v1.Pod }

// MakePod starts a pod in namespace "default".
func MakePod() *PodWrapper {
	return &PodWrapper{v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default",
		Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: v1.PodSpec{SchedulerName: jobs.SchedulerName,
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}}}}}
}

// Name sets name and UID.
func (p *PodWrapper) Name(n string) *PodWrapper {
	p.Pod.Name, p.Pod.UID = n, types.UID("uid-"+n)
	return p
}

// Job makes the pod a Coach pod of job with role and minimum group.
func (p *PodWrapper) Job(job string, role jobs.Role, minGroup int) *PodWrapper {
	p.Labels[jobs.LabelJob] = job
	p.Labels[jobs.LabelRole] = string(role)
	p.Annotations[jobs.AnnotationMinGroup] = strconv.Itoa(minGroup)
	return p
}

// Label sets a label.
func (p *PodWrapper) Label(k, v string) *PodWrapper { p.Labels[k] = v; return p }

// Created sets the creation time.
func (p *PodWrapper) Created(t time.Time) *PodWrapper {
	p.CreationTimestamp = metav1.NewTime(t)
	return p
}

// Node binds the pod to a node.
func (p *PodWrapper) Node(n string) *PodWrapper { p.Spec.NodeName = n; return p }

// Priority sets the pod priority.
func (p *PodWrapper) Priority(v int32) *PodWrapper { p.Spec.Priority = &v; return p }

// Req sets the CPU (millicores) and memory (MiB) requests.
func (p *PodWrapper) Req(milliCPU, memMiB int64) *PodWrapper {
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
	}
	return p
}

// Terminating marks the pod as being deleted.
func (p *PodWrapper) Terminating() *PodWrapper {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	return p
}

// Obj returns the pod.
func (p *PodWrapper) Obj() *v1.Pod { return p.Pod.DeepCopy() }

// Observed returns a registry that has seen the pods, in order.
func Observed(pods ...*v1.Pod) *jobs.Registry {
	r := jobs.NewRegistry()
	for _, p := range pods {
		r.Observe(p)
	}
	return r
}
