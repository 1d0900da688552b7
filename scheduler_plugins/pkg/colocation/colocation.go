// Package colocation scores nodes for Coach pods (thesis Algorithm 3): a node
// already hosting the job's pods is best, an empty one next, and a node that
// hosts another job's Coach pods is never preferred. Co-located servers and
// workers talk over memory; pods of different jobs only compete.
package colocation

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/coach/scheduler_plugins/pkg/jobs"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "CoachColocation"

// Scores on the framework's 0..100 scale.
const (
	ScoreSameJob   int64 = fwk.MaxNodeScore     // hosts this job's pods, no other job's
	ScoreEmpty     int64 = fwk.MaxNodeScore / 2 // hosts no Coach pod
	ScoreOtherJobs int64 = fwk.MinNodeScore     // hosts another job's Coach pods
)

// Plugin implements PreScore and Score.
type Plugin struct{}

var (
	_ fwk.PreScorePlugin = &Plugin{}
	_ fwk.ScorePlugin    = &Plugin{}
)

// New builds the plugin.
func New(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return &Plugin{}, nil }

// Name returns the plugin name.
func (p *Plugin) Name() string { return Name }

// PreScore skips scoring for pods that are not Coach pods: they pass through.
func (p *Plugin) PreScore(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, ok := jobs.MemberOf(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score rates one node for a Coach pod from the pods the node holds
// (including pods assumed for a group waiting at the gang barrier).
func (p *Plugin) Score(_ context.Context, _ fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return 0, nil
	}
	return Rate(m.Job, ni.GetPods()), nil
}

// Rate is the scoring rule on its own.
func Rate(job jobs.Key, pods []fwk.PodInfo) int64 {
	same := false
	for _, pi := range pods {
		o, ok := jobs.MemberOf(pi.GetPod())
		if !ok {
			continue
		}
		if o.Job != job {
			return ScoreOtherJobs
		}
		same = true
	}
	if same {
		return ScoreSameJob
	}
	return ScoreEmpty
}

// ScoreExtensions is not needed: scores are already on 0..100.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }
