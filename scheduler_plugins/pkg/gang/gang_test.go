package gang_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/coach/scheduler_plugins/pkg/gang"
	"github.com/coach/scheduler_plugins/pkg/jobs"
	"github.com/coach/scheduler_plugins/pkg/testutil"
)

// fakeHandle provides the two things the gang plugin asks of the framework:
// the pods waiting at Permit and a snapshot of the nodes.
type fakeHandle struct {
	fwk.Handle
	waiting  []*fakeWaiting
	snapshot *schedcache.Snapshot
	events   fakeRecorder

	mu        sync.Mutex
	activated map[string]bool
}

func (h *fakeHandle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.activated == nil {
		h.activated = map[string]bool{}
	}
	for _, p := range pods {
		h.activated[p.Name] = true
	}
}

func (h *fakeHandle) wasActivated(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.activated[name]
}

// activatedSoon waits up to 5 s for the pod to be activated (the plugin
// activates pods from a goroutine).
func (h *fakeHandle) activatedSoon(name string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if h.wasActivated(name) {
			return true
		}
	}
	return false
}

func (h *fakeHandle) IterateOverWaitingPods(f func(fwk.WaitingPod)) {
	for _, w := range h.waiting {
		if w.state == "waiting" {
			f(w)
		}
	}
}

func (h *fakeHandle) SnapshotSharedLister() fwk.SharedLister { return h.snapshot }

func (h *fakeHandle) EventRecorder() events.EventRecorder { return &h.events }

// fakeRecorder keeps the notes of the events a plugin records.
type fakeRecorder struct {
	events.EventRecorder
	mu    sync.Mutex
	notes []string
}

func (r *fakeRecorder) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, eventtype+" "+reason+": "+fmt.Sprintf(note, args...))
}

func (h *fakeHandle) SharedInformerFactory() informers.SharedInformerFactory { return nil }

type fakeWaiting struct {
	pod   *v1.Pod
	state string
}

func (w *fakeWaiting) GetPod() *v1.Pod             { return w.pod }
func (w *fakeWaiting) GetPendingPlugins() []string { return []string{gang.Name} }
func (w *fakeWaiting) Allow(string)                { w.state = "allowed" }
func (w *fakeWaiting) Reject(string, string)       { w.state = "rejected" }

func node(name string, slots int64) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(slots*1000, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(slots<<30, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}}}
}

// jobPods makes n pods of a job, one scheduler, one server, the rest workers,
// each asking for one slot (1 CPU, 1 GiB).
func jobPods(job string, n, minGroup int) []*v1.Pod {
	var out []*v1.Pod
	for i := 0; i < n; i++ {
		role := jobs.RoleWorker
		switch i {
		case 0:
			role = jobs.RoleScheduler
		case 1:
			role = jobs.RoleServer
		}
		out = append(out, testutil.MakePod().Name(fmt.Sprintf("%s-%d", job, i)).Job(job, role, minGroup).Req(1000, 1024).Obj())
	}
	return out
}

func TestPreEnqueue(t *testing.T) {
	tests := []struct {
		name string
		pods []*v1.Pod
		want fwk.Code
	}{
		{"complete job", jobPods("a", 4, 4), fwk.Success},
		{"missing server and workers", jobPods("a", 1, 1), fwk.UnschedulableAndUnresolvable},
		{"fewer pods than the group", jobPods("a", 3, 4), fwk.UnschedulableAndUnresolvable},
		{"non-Coach pod passes", []*v1.Pod{testutil.MakePod().Name("web").Obj()}, fwk.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testutil.Observed(tt.pods...)
			pl := gang.NewWithRegistry(&fakeHandle{}, r, time.Second)
			if got := pl.PreEnqueue(t.Context(), tt.pods[0]).Code(); got != tt.want {
				t.Fatalf("PreEnqueue = %v, want %v", got, tt.want)
			}
		})
	}
}

// The queue re-runs PreEnqueue for a gated pod only on its own updates, so the
// pod that completes a job wakes its gated siblings.
func TestThePodThatCompletesAJobWakesItsGatedSiblings(t *testing.T) {
	pods := jobPods("a", 4, 4)
	h := &fakeHandle{}
	pl := gang.NewWithRegistry(h, jobs.NewRegistry(), time.Second)
	for _, p := range pods[:3] {
		if s := pl.PreEnqueue(t.Context(), p); s.IsSuccess() {
			t.Fatalf("%s: PreEnqueue = Success with 3 of the 4 pods", p.Name)
		}
	}
	if s := pl.PreEnqueue(t.Context(), pods[3]); !s.IsSuccess() {
		t.Fatalf("the fourth pod: PreEnqueue = %v", s)
	}
	for _, p := range pods[:3] {
		if !h.activatedSoon(p.Name) {
			t.Fatalf("%s is still gated: activated %v", p.Name, h.activated)
		}
	}
	if h.wasActivated(pods[3].Name) {
		t.Fatal("the pod that completed the job was activated too (it is being queued already)")
	}
}

func TestPreFilterRefusesGroupsThatDoNotFit(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []*v1.Node
		bound   []*v1.Pod // already on nodes (other jobs)
		waiting []*v1.Pod // other jobs' pods waiting at the barrier
		pending []*v1.Pod // other jobs' pods not placed yet
		job     []*v1.Pod
		want    fwk.Code
	}{
		{name: "fits", nodes: []*v1.Node{node("n1", 4), node("n2", 4)}, job: jobPods("a", 4, 4), want: fwk.Success},
		{name: "cluster full", nodes: []*v1.Node{node("n1", 4)},
			bound: bind(jobPods("x", 4, 4), "n1"), job: jobPods("a", 4, 4), want: fwk.Unschedulable},
		{name: "half full, group of four does not fit", nodes: []*v1.Node{node("n1", 4), node("n2", 4)},
			bound: bind(jobPods("x", 6, 6), "n1", "n2"), job: jobPods("a", 4, 4), want: fwk.Unschedulable},
		{name: "room reserved for an in-flight group", nodes: []*v1.Node{node("n1", 4), node("n2", 4)},
			waiting: bind(jobPods("x", 4, 4)[:1], "n1"), pending: jobPods("x", 4, 4)[1:], bound: bind(jobPods("y", 4, 4)[:1], "n2"),
			job: jobPods("a", 4, 4), want: fwk.Unschedulable},
		{name: "without the in-flight group it fits", nodes: []*v1.Node{node("n1", 4), node("n2", 4)},
			bound: bind(jobPods("y", 4, 4)[:1], "n2"), job: jobPods("a", 4, 4), want: fwk.Success},
		{name: "non-Coach pod skipped", nodes: []*v1.Node{node("n1", 0)}, job: []*v1.Pod{testutil.MakePod().Name("web").Obj()}, want: fwk.Skip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// the waiting pods hold their node in the scheduler's cache, but are not bound yet
			var unbound []*v1.Pod
			for _, p := range tt.waiting {
				q := p.DeepCopy()
				q.Spec.NodeName = ""
				unbound = append(unbound, q)
			}
			r := testutil.Observed(append(append(append([]*v1.Pod{}, tt.bound...), unbound...), append(tt.pending, tt.job...)...)...)
			h := &fakeHandle{snapshot: schedcache.NewSnapshot(append(append([]*v1.Pod{}, tt.bound...), tt.waiting...), tt.nodes)}
			for _, p := range tt.waiting {
				h.waiting = append(h.waiting, &fakeWaiting{pod: p, state: "waiting"})
			}
			pl := gang.NewWithRegistry(h, r, time.Second)
			_, s := pl.PreFilter(t.Context(), nil, tt.job[0], nil)
			if s.Code() != tt.want {
				t.Fatalf("PreFilter = %v, want %v", s, tt.want)
			}
		})
	}
}

func bind(pods []*v1.Pod, nodes ...string) []*v1.Pod {
	for i, p := range pods {
		p.Spec.NodeName = nodes[i*len(nodes)/len(pods)]
	}
	return pods
}

func TestPermitBarrier(t *testing.T) {
	pods := jobPods("a", 5, 4) // minimum group 4, one elastic extra
	r := testutil.Observed(pods...)
	h := &fakeHandle{}
	pl := gang.NewWithRegistry(h, r, 7*time.Second)
	for i := 0; i < 3; i++ {
		s, timeout := pl.Permit(t.Context(), nil, pods[i], "n1")
		if !s.IsWait() || timeout != 7*time.Second {
			t.Fatalf("pod %d: Permit = %v %v, want Wait 7s", i, s, timeout)
		}
		h.waiting = append(h.waiting, &fakeWaiting{pod: pods[i], state: "waiting"})
	}
	if s, _ := pl.Permit(t.Context(), nil, pods[3], "n1"); !s.IsSuccess() {
		t.Fatalf("fourth pod: Permit = %v, want Success", s)
	}
	for i, w := range h.waiting {
		if w.state != "allowed" {
			t.Fatalf("waiting pod %d is %s, want allowed", i, w.state)
		}
	}
	// the extra goes through alone once the group is placed
	if s, _ := pl.Permit(t.Context(), nil, pods[4], "n1"); !s.IsSuccess() {
		t.Fatalf("extra: Permit = %v, want Success", s)
	}
}

// frameworkLikeHandle lists rejected pods among the waiting ones, as the
// framework does until a rejected pod's binding goroutine wakes and removes
// it; the framework's Allow then does nothing for it.
type frameworkLikeHandle struct{ fakeHandle }

func (h *frameworkLikeHandle) IterateOverWaitingPods(f func(fwk.WaitingPod)) {
	for _, w := range h.waiting {
		if w.state != "allowed" {
			f(w)
		}
	}
}

// A group is never let through with a pod that was rejected at the barrier
// but is still listed there: before, the last pod's Permit allowed the group
// and three of its four pods bound.
func TestAGroupDoesNotPassWithARejectedSibling(t *testing.T) {
	tests := []struct {
		name   string
		reject func(pl *gang.Plugin, h *frameworkLikeHandle, pods []*v1.Pod)
	}{
		{"released by the plugin", func(pl *gang.Plugin, h *frameworkLikeHandle, pods []*v1.Pod) {
			// e.g. by a pod of the group that found no node (PostFilter)
			pl.PostFilter(t.Context(), framework.NewCycleState(), pods[3], nil)
			for _, w := range h.waiting {
				w.state = "rejected" // the release did this through the framework
			}
		}},
		{"the framework's timer", func(_ *gang.Plugin, h *frameworkLikeHandle, _ []*v1.Pod) {
			time.Sleep(60 * time.Millisecond) // past the plugin's 50 ms timeout
			h.waiting[0].state = "rejected"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := jobPods("a", 4, 4)
			r := testutil.Observed(pods...)
			h := &frameworkLikeHandle{fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 8)})}}
			pl := gang.NewWithRegistry(h, r, 50*time.Millisecond)
			for i := 0; i < 3; i++ {
				if s, _ := pl.Permit(t.Context(), nil, pods[i], "n1"); !s.IsWait() {
					t.Fatalf("pod %d: Permit = %v, want Wait", i, s)
				}
				h.waiting = append(h.waiting, &fakeWaiting{pod: pods[i], state: "waiting"})
			}
			tt.reject(pl, h, pods)
			if s, _ := pl.Permit(t.Context(), nil, pods[3], "n1"); s.IsSuccess() || s.IsWait() {
				t.Fatalf("Permit(pod 3) = %v, want it rejected with the group", s)
			}
			if v, _ := r.View(jobs.Key{Namespace: "default", Name: "a"}); v.Permitted != 0 {
				t.Fatalf("%d pods permitted, want none: %+v", v.Permitted, v)
			}
		})
	}
}

// A group at the barrier sets aside the room its pods still to come need,
// not that of its waiting pods, which hold their nodes already. Before, its
// waiting 1-CPU pods stood for its missing 3-CPU pod, a younger job took the
// room, and the group's last pod found no node.
func TestAGroupAtTheBarrierKeepsTheRoomItsLastPodNeeds(t *testing.T) {
	x := jobPods("x", 4, 4)
	x[3] = testutil.MakePod().Name("x-3").Job("x", jobs.RoleWorker, 4).Req(3000, 3072).Obj()
	y := jobPods("y", 3, 3)
	r := observedInOrder(x, y)
	h := &fakeHandle{}
	var assumed []*v1.Pod // the waiting pods hold their node in the scheduler's cache
	for _, p := range x[:3] {
		h.waiting = append(h.waiting, &fakeWaiting{pod: p, state: "waiting"})
		a := p.DeepCopy()
		a.Spec.NodeName = "n1"
		assumed = append(assumed, a)
	}
	for _, tt := range []struct {
		cpus int64
		want bool
	}{{7, false}, {9, true}} { // 3 CPU held by x's waiting pods, 3 for x-3, then y's 3
		t.Run(fmt.Sprintf("%d CPU", tt.cpus), func(t *testing.T) {
			h.snapshot = schedcache.NewSnapshot(assumed, []*v1.Node{node("n1", tt.cpus)})
			pl := gang.NewWithRegistry(h, r, time.Second)
			if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), y[0], nil); s.IsSuccess() != tt.want {
				t.Fatalf("PreFilter(y-0) = %v, want success %v", s, tt.want)
			}
		})
	}
}

func TestUnreserveReleasesTheGroup(t *testing.T) {
	pods := append(jobPods("a", 4, 4), jobPods("b", 4, 4)...)
	r := testutil.Observed(pods...)
	h := &fakeHandle{}
	for _, i := range []int{0, 1, 4} {
		h.waiting = append(h.waiting, &fakeWaiting{pod: pods[i], state: "waiting"})
	}
	pl := gang.NewWithRegistry(h, r, time.Second)
	pl.Unreserve(t.Context(), nil, pods[2], "n1")
	want := []string{"rejected", "rejected", "waiting"}
	for i, w := range h.waiting {
		if w.state != want[i] {
			t.Fatalf("waiting pod %s is %s, want %s", w.pod.Name, w.state, want[i])
		}
	}
}

// A permitted pod that fails to bind no longer counts as placed: its group is
// short of it again.
func TestUnreserveOfAPermittedPodUnplacesIt(t *testing.T) {
	pods := jobPods("a", 4, 4)
	r := testutil.Observed(pods...)
	h := &fakeHandle{}
	pl := gang.NewWithRegistry(h, r, time.Second)
	for i := 0; i < 3; i++ {
		pl.Permit(t.Context(), nil, pods[i], "n1")
		h.waiting = append(h.waiting, &fakeWaiting{pod: pods[i], state: "waiting"})
	}
	if s, _ := pl.Permit(t.Context(), nil, pods[3], "n1"); !s.IsSuccess() {
		t.Fatalf("Permit = %v, want Success", s)
	}
	pl.Unreserve(t.Context(), nil, pods[3], "n1") // its binding failed
	if v, _ := r.View(jobs.Key{Namespace: "default", Name: "a"}); v.Permitted != 3 || v.Placed() >= v.MinGroup {
		t.Fatalf("View = %+v, want 3 permitted: the pod that failed to bind is not placed", v)
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    gang.Args
		wantErr bool
	}{
		{"defaults", gang.Args{}, false},
		{"explicit", gang.Args{PermitTimeoutSeconds: 5}, false},
		{"negative", gang.Args{PermitTimeoutSeconds: -1}, true},
		{"explicit starvation", gang.Args{StarvationSeconds: 600}, false},
		{"negative starvation", gang.Args{StarvationSeconds: -5}, true},
		{"the framework's longest wait", gang.Args{PermitTimeoutSeconds: 900}, false},
		// the framework would cut it to 15 minutes; 1e10 s wrapped negative and every group was
		// rejected the moment it waited
		{"longer than the framework waits", gang.Args{PermitTimeoutSeconds: 901}, true},
		{"wraps as a duration", gang.Args{PermitTimeoutSeconds: 10_000_000_000}, true},
		{"a day's starvation", gang.Args{StarvationSeconds: 86400}, false},
		{"starvation that wraps", gang.Args{StarvationSeconds: 10_000_000_000}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.args
			gang.SetDefaults(&a)
			if err := gang.Validate(a); (err != nil) != tt.wantErr {
				t.Fatalf("Validate(%+v) = %v", a, err)
			}
		})
	}
}

// A job yields to the jobs ahead of it in the queue: older ones of its
// priority, and any of a higher priority (as the queue sort orders pods). The
// job it yields to is woken: its pods may be waiting out a backoff while the
// room stands empty.
func TestAJobYieldsToJobsAheadOfItThatFit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name                   string
		slots                  int64
		olderPrio, youngerPrio int32
		younger                bool // PreFilter the younger job's pod, else the older's
		want                   fwk.Code
	}{
		{"older goes", 4, 0, 0, false, fwk.Success},
		{"younger yields while the older fits, and wakes it", 4, 0, 0, true, fwk.Unschedulable},
		{"younger backfills when the older cannot fit", 3, 0, 0, true, fwk.Success},
		{"a younger job of higher priority does not yield", 4, 0, 1000, true, fwk.Success},
		{"an older job of lower priority yields to it, and wakes it", 4, 0, 1000, false, fwk.Unschedulable},
		{"a younger job of lower priority yields", 4, 1000, 0, true, fwk.Unschedulable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			older, younger := jobPods("old", 4, 4), jobPods("young", 2+1, 3)
			for _, p := range older {
				p.CreationTimestamp, p.Spec.Priority = metav1.NewTime(t0), &tt.olderPrio
			}
			for _, p := range younger {
				p.CreationTimestamp, p.Spec.Priority = metav1.NewTime(t0.Add(time.Second)), &tt.youngerPrio
			}
			r := testutil.Observed(append(append([]*v1.Pod{}, older...), younger...)...)
			pod, other := older[0], younger[1]
			if tt.younger {
				pod, other = younger[0], older[1]
			}
			h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", tt.slots)})}
			_, s := gang.NewWithRegistry(h, r, time.Second).PreFilter(t.Context(), nil, pod, nil)
			if s.Code() != tt.want {
				t.Fatalf("PreFilter = %v, want %v", s, tt.want)
			}
			if s.IsSuccess() {
				time.Sleep(100 * time.Millisecond) // activation runs in a goroutine
				if h.wasActivated(older[1].Name) || h.wasActivated(younger[1].Name) {
					t.Fatal("a job was woken though nobody yielded")
				}
			} else if !h.activatedSoon(other.Name) {
				t.Fatalf("the job yielded to was not woken: activated %v", h.activated)
			}
		})
	}
}

// A pod of a minimum group that the filters found no node for (here: a node
// selector no node has) keeps its siblings out of the barrier until it passes
// the filters itself; otherwise the siblings come back at once, hold the room
// for the whole timeout, and a younger job that fits never gets it (#713).
// PreFilter's own refusals (group does not fit, yield) block nothing.
func TestAGroupWaitsForItsPodThatFoundNoNode(t *testing.T) {
	tests := []struct {
		name string
		// what happens after pod 3 of job a failed a scheduling cycle
		refusedByPreFilter bool // the cycle failed in the gang's PreFilter, not in the filters
		passes             bool // pod 3 then passes the filters (reaches Permit)
		deleted            bool // pod 3 is deleted
		want               fwk.Code
	}{
		{name: "siblings wait", want: fwk.Unschedulable},
		{name: "the gang's own refusal blocks nothing", refusedByPreFilter: true, want: fwk.Success},
		{name: "released once it passes the filters", passes: true, want: fwk.Success},
		{name: "released when it is gone", deleted: true, want: fwk.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := jobPods("a", 4, 4)
			r := testutil.Observed(pods...)
			h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 4)})}
			pl := gang.NewWithRegistry(h, r, time.Second)
			state := framework.NewCycleState()
			if tt.refusedByPreFilter { // the same cycle, seen by a scheduler whose node is too small
				small := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 3)})}
				if _, s := gang.NewWithRegistry(small, r, time.Second).PreFilter(t.Context(), state, pods[3], nil); s.IsSuccess() {
					t.Fatal("PreFilter on 3 slots should refuse a group of 4")
				}
			}
			pl.PostFilter(t.Context(), state, pods[3], nil)
			if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), pods[3], nil); !s.IsSuccess() {
				t.Fatalf("the pod that found no node: PreFilter = %v, want Success (it may try again)", s)
			}
			if tt.passes {
				if s, _ := pl.Permit(t.Context(), nil, pods[3], "n1"); !s.IsWait() {
					t.Fatalf("Permit = %v, want Wait", s)
				}
				if !h.activatedSoon(pods[0].Name) || h.wasActivated(pods[3].Name) {
					t.Fatalf("activated %v, want the siblings only", h.activated)
				}
			}
			if tt.deleted { // and replaced by a new pod (its controller recreates it)
				r.Forget(pods[3])
				again := pods[3].DeepCopy()
				again.UID = "uid-3-again"
				r.Observe(again)
			}
			if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), pods[0], nil); s.Code() != tt.want {
				t.Fatalf("PreFilter = %v, want %v", s, tt.want)
			}
		})
	}
}

// A pod the minimum group can do without (an extra worker) blocks nothing: the
// other pods make up the group, as they did before the block existed.
func TestAnExtraPodThatFoundNoNodeBlocksNothing(t *testing.T) {
	pods := jobPods("a", 5, 4) // pod 4 is a second worker beyond the minimum group
	r := testutil.Observed(pods...)
	pl := gang.NewWithRegistry(&fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 8)})}, r, time.Second)
	pl.PostFilter(t.Context(), framework.NewCycleState(), pods[4], nil)
	if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), pods[0], nil); !s.IsSuccess() {
		t.Fatalf("PreFilter = %v, want Success: the group is complete without pod 4", s)
	}
}

// Pods that found no node block their group together: two workers of a
// group of 3 may each be spared, but not both (the scheduler and server would
// otherwise hold their nodes at the barrier for timeout after timeout).
func TestPodsThatFoundNoNodeBlockTogether(t *testing.T) {
	tests := []struct {
		name   string
		failed []int // pods that found no node, in order
		passes int   // then this pod passes the filters (-1: none)
		wakes  bool  // and that wakes its siblings (they were held back)
		want   fwk.Code
	}{
		{name: "one of two workers", failed: []int{2}, passes: -1, want: fwk.Success},
		{name: "one of two workers, then it passes: nothing was held back", failed: []int{2}, passes: 2, want: fwk.Success},
		{name: "both workers", failed: []int{2, 3}, passes: -1, want: fwk.Unschedulable},
		{name: "both, then one passes the filters", failed: []int{2, 3}, passes: 3, wakes: true, want: fwk.Success},
		{name: "the scheduler", failed: []int{0}, passes: -1, want: fwk.Unschedulable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := jobPods("a", 4, 3) // scheduler, server, two workers; group of 3
			r := testutil.Observed(pods...)
			h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 8)})}
			pl := gang.NewWithRegistry(h, r, time.Second)
			for _, i := range tt.failed {
				pl.PostFilter(t.Context(), framework.NewCycleState(), pods[i], nil)
			}
			if tt.passes >= 0 {
				if s, _ := pl.Permit(t.Context(), nil, pods[tt.passes], "n1"); !s.IsWait() {
					t.Fatalf("Permit = %v, want Wait", s)
				}
				if tt.wakes && !h.activatedSoon(pods[1].Name) {
					t.Fatalf("activated %v, want the siblings", h.activated)
				}
				if !tt.wakes {
					time.Sleep(50 * time.Millisecond) // activation runs in a goroutine
					if h.wasActivated(pods[1].Name) {
						t.Fatalf("activated %v, want nothing", h.activated)
					}
				}
			}
			if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), pods[1], nil); s.Code() != tt.want {
				t.Fatalf("PreFilter of the server = %v, want %v", s, tt.want)
			}
		})
	}
}

// A blocked older job cannot start, so a younger job that fits does not yield
// to it, also once the older job's failure is older than the permit timeout
// (its blocked siblings are refused in PreFilter, so nothing renews it).
func TestYoungerJobDoesNotYieldToABlockedOlderJob(t *testing.T) {
	older, younger, r := olderAndYounger("old", "young")
	timeout := 20 * time.Millisecond
	pl := gang.NewWithRegistry(&fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 4)})}, r, timeout)
	pl.PostFilter(t.Context(), framework.NewCycleState(), older[3], nil)
	time.Sleep(2 * timeout)
	if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), younger[0], nil); !s.IsSuccess() {
		t.Fatalf("PreFilter = %v, want Success", s)
	}
}

// A job that yields must not wake itself: the queue would move its pods
// straight back to the active queue, past backoff (about 15,000 scheduling
// attempts a second on the local control plane).
func TestAYieldingJobDoesNotWakeItself(t *testing.T) {
	older, younger, r := olderAndYounger("old", "young")
	h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 4)})}
	pl := gang.NewWithRegistry(h, r, time.Second)
	state := framework.NewCycleState()
	if _, s := pl.PreFilter(t.Context(), state, younger[0], nil); s.IsSuccess() {
		t.Fatal("the younger job should yield")
	}
	pl.PostFilter(t.Context(), state, younger[0], nil)
	time.Sleep(100 * time.Millisecond) // activation runs in a goroutine
	if h.wasActivated(younger[1].Name) {
		t.Fatalf("the yielding job woke its own pods: %v", h.activated)
	}
	// once the older job's group is placed, the younger one is woken
	for _, p := range older[:3] {
		h.waiting = append(h.waiting, &fakeWaiting{pod: p, state: "waiting"})
	}
	if s, _ := pl.Permit(t.Context(), nil, older[3], "n1"); !s.IsSuccess() {
		t.Fatalf("Permit = %v", s)
	}
	if !h.activatedSoon(younger[1].Name) {
		t.Fatal("the younger job was not woken when the older job's group was placed")
	}
}

// A job that yields does not wake the other jobs that yielded: nothing changed
// for them. On the local control plane two yielding jobs woke each other
// about 3,400 times a second, so the active queue never emptied and the job
// they yielded to waited out its backoff (7-8 s) with the room idle.
func TestAYieldWakesNoOtherYieldingJob(t *testing.T) {
	older, b, r := olderAndYounger("a", "b")
	c := jobPods("c", 3, 3)
	for _, p := range c {
		p.CreationTimestamp = metav1.NewTime(time.Unix(1002, 0))
		r.Observe(p)
	}
	h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 4)})}
	pl := gang.NewWithRegistry(h, r, time.Second)
	refuse(t, pl, b[0], "b should yield to a")
	refuse(t, pl, c[0], "c should yield to a")
	if !h.activatedSoon(older[0].Name) {
		t.Fatal("a was not woken")
	}
	time.Sleep(100 * time.Millisecond) // activation runs in a goroutine
	if h.wasActivated(b[1].Name) {
		t.Fatalf("c's yield woke b: activated %v", h.activated)
	}
}

// The barrier lets a minimum group through only with a pod of every role:
// three workers of a group of 3 held the nodes, and the scheduler and server
// found none, so the job held 4 CPUs and could never start. A worker the group
// does not need yet is kept out of the barrier (without releasing the group).
func TestTheMinimumGroupHasEveryRole(t *testing.T) {
	pod := func(name string, role jobs.Role) *v1.Pod {
		return testutil.MakePod().Name(name).Job("a", role, 3).Req(1000, 1024).Obj()
	}
	w0, w1, w2 := pod("a-w0", jobs.RoleWorker), pod("a-w1", jobs.RoleWorker), pod("a-w2", jobs.RoleWorker)
	sched, server := pod("z-sched", jobs.RoleScheduler), pod("z-server", jobs.RoleServer)
	r := testutil.Observed(w0, w1, w2, sched, server)
	h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 4)})}
	pl := gang.NewWithRegistry(h, r, time.Second)
	steps := []struct {
		pod       *v1.Pod
		preFilter fwk.Code // and, if it passes, Permit:
		permit    string   // "wait" or "allow"
	}{
		{w0, fwk.Success, "wait"},
		{w1, fwk.Unschedulable, ""}, // room for the scheduler and the server only
		{sched, fwk.Success, "wait"},
		{w2, fwk.Unschedulable, ""},
		{server, fwk.Success, "allow"},
		{w1, fwk.Success, "allow"}, // an extra now
	}
	for i, st := range steps {
		state := framework.NewCycleState()
		_, s := pl.PreFilter(t.Context(), state, st.pod, nil)
		if s.Code() != st.preFilter {
			t.Fatalf("step %d (%s): PreFilter = %v, want %v", i, st.pod.Name, s, st.preFilter)
		}
		if !s.IsSuccess() {
			pl.PostFilter(t.Context(), state, st.pod, nil)
			for _, w := range h.waiting {
				if w.state != "waiting" {
					t.Fatalf("step %d: %s was %s: a worker the group does not need released it", i, w.pod.Name, w.state)
				}
			}
			continue
		}
		ps, _ := pl.Permit(t.Context(), nil, st.pod, "n1")
		switch {
		case st.permit == "wait" && ps.IsWait():
			h.waiting = append(h.waiting, &fakeWaiting{pod: st.pod, state: "waiting"})
		case st.permit == "allow" && ps.IsSuccess():
			for _, w := range h.waiting {
				if w.state == "allowed" {
					r.MarkPermitted(w.pod)
				}
			}
		default:
			t.Fatalf("step %d (%s): Permit = %v, want %s", i, st.pod.Name, ps, st.permit)
		}
	}
}

// A gated pod gets no scheduling condition, so without an event a job short
// of pods is pending with no reason anywhere. An event when the reason changes
// as pods arrive, not one per retry.
func TestAGatedJobSaysWhy(t *testing.T) {
	r := jobs.NewRegistry()
	h := &fakeHandle{}
	pl := gang.NewWithRegistry(h, r, time.Second)
	for _, p := range jobPods("a", 3, 5) { // pods arrive one by one; each is retried
		r.Observe(p)
		for range 2 {
			if s := pl.PreEnqueue(t.Context(), p); s.IsSuccess() {
				t.Fatalf("PreEnqueue(%s) = %v, want gated", p.Name, s)
			}
		}
	}
	want := []string{"Normal WaitingForGang: job default/a has no server, worker pod yet",
		"Normal WaitingForGang: job default/a has no worker pod yet",
		"Normal WaitingForGang: job default/a has 3 of the 5 pods of its minimum group"}
	if fmt.Sprint(h.events.notes) != fmt.Sprint(want) {
		t.Fatalf("events = %q, want %q", h.events.notes, want)
	}
}

// A min-group annotation that is not a whole number was read as 3, and a
// static job's group bound in part. Its pods wait with an event that names the
// pod and the annotation, and go on once it is fixed.
func TestAJobWithAMinGroupItCannotReadWaitsAndSaysWhich(t *testing.T) {
	r := jobs.NewRegistry()
	h := &fakeHandle{}
	pl := gang.NewWithRegistry(h, r, time.Second)
	pods := jobPods("a", 3, 3)
	for _, p := range pods {
		p.Annotations[jobs.AnnotationMinGroup] = "3 "
		r.Observe(p)
	}
	if s := pl.PreEnqueue(t.Context(), pods[0]); s.IsSuccess() {
		t.Fatalf("PreEnqueue = %v, want gated", s)
	}
	want := []string{`Normal WaitingForGang: job default/a waits until this is fixed: pod a-0: annotation ` +
		`coach.io/min-group is "3 ", not a whole number of pods`}
	if fmt.Sprint(h.events.notes) != fmt.Sprint(want) {
		t.Fatalf("events = %q, want %q", h.events.notes, want)
	}
	for _, p := range pods {
		p.Annotations[jobs.AnnotationMinGroup] = "3"
		r.Observe(p)
	}
	if s := pl.PreEnqueue(t.Context(), pods[0]); !s.IsSuccess() {
		t.Fatalf("PreEnqueue after the fix = %v, want admitted", s)
	}
}

// Which pod events wake a gated or refused pod of job a. An annotation-only
// update is a plain Pod/Update: registered only for Add and label updates, a
// fixed min-group stayed unseen until the queue's 5-minute flush.
func TestWhichPodEventsWakeAJob(t *testing.T) {
	waiting := jobPods("a", 3, 3)[0]
	sibling := jobPods("a", 3, 3)[2]
	fixed := sibling.DeepCopy()
	broken := sibling.DeepCopy()
	broken.Annotations[jobs.AnnotationMinGroup] = "3 "
	running := sibling.DeepCopy()
	running.Status.Phase = v1.PodRunning
	relabelled := sibling.DeepCopy()
	relabelled.Labels["x"] = "y"
	other := jobPods("b", 3, 3)[2]
	otherPlaced := other.DeepCopy()
	otherPlaced.Spec.NodeName = "n1"
	otherFixed := other.DeepCopy()
	other.Annotations[jobs.AnnotationMinGroup] = "3 "
	tests := []struct {
		name     string
		old, new *v1.Pod
		want     fwk.QueueingHint
	}{
		{"a sibling added", nil, sibling, fwk.Queue},
		{"a sibling's min-group fixed", broken, fixed, fwk.Queue},
		{"a sibling's status changed", sibling, running, fwk.QueueSkip},
		{"a sibling relabelled", sibling, relabelled, fwk.Queue},
		{"another job's pod added", nil, other, fwk.QueueSkip},
		{"another job's pod placed", nil, otherPlaced, fwk.Queue},
		{"another job's min-group fixed", other, otherFixed, fwk.QueueSkip},
	}
	pl := gang.NewWithRegistry(&fakeHandle{}, jobs.NewRegistry(), time.Second)
	events, err := pl.EventsToRegister(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// the events the queue derives from the change, and the first
			// registered event that matches them decides (none: the pod waits)
			var old interface{}
			incoming := []fwk.ClusterEvent{{Resource: fwk.Pod, ActionType: fwk.Add}}
			if tt.old != nil {
				old, incoming = tt.old, framework.PodSchedulingPropertiesChange(tt.new, tt.old)
			}
			got, err := fwk.QueueSkip, error(nil)
			for _, e := range events {
				if slices.ContainsFunc(incoming, func(in fwk.ClusterEvent) bool { return framework.MatchClusterEvents(e.Event, in) }) {
					got, err = e.QueueingHintFn(klog.Background(), waiting, old, tt.new)
					break
				}
			}
			if err != nil || got != tt.want {
				t.Fatalf("woken = %v, %v; want %v (events %v)", got, err, tt.want, incoming)
			}
		})
	}
}

// A job whose minimum group did not fit the free room keeps its place in the
// queue: when room comes free while it waits out its backoff, a younger job
// that would take the room yields to it. Before, the refusal marked it failed
// for the barrier's timeout, and every younger job that fitted overtook it (a
// 4-pod job waited 26 s behind six younger 3-pod jobs in `coach cluster
// compare`). A job that the filters refused does not hold room.
func TestAJobShortOfRoomKeepsItsPlace(t *testing.T) {
	tests := []struct {
		name    string
		filters bool // the filters found no node for the older job's pod, not PreFilter
		want    fwk.Code
	}{
		{"short of room: the younger job yields", false, fwk.Unschedulable},
		{"refused by the filters: the younger job goes", true, fwk.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			older, younger, r := olderAndYounger("a", "b") // 4 pods and 3
			h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 3)})}
			pl := gang.NewWithRegistry(h, r, 30*time.Second)
			if tt.filters {
				pl.PostFilter(t.Context(), framework.NewCycleState(), older[0], nil)
			} else {
				refuse(t, pl, older[0], "a should not fit 3 slots")
			}
			h.snapshot = schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 4)}) // room comes free
			if tt.filters {
				pl.Permit(t.Context(), nil, older[0], "n1") // it passed the filters after all: no block left
				h.waiting = nil
			}
			if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), younger[0], nil); s.Code() != tt.want {
				t.Fatalf("b: PreFilter = %v, want %v", s, tt.want)
			}
		})
	}
}

// A job that yielded is not woken by a failure of its own pod: it would skip
// its backoff (15,000 scheduling cycles a second, before).
func TestAYieldedJobIsNotWokenByItsOwnPodsFailure(t *testing.T) {
	older, younger, r := olderAndYounger("a", "b")
	h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 6)})}
	pl := gang.NewWithRegistry(h, r, 30*time.Second)
	refuse(t, pl, younger[0], "b should yield to a")
	if !h.activatedSoon(older[0].Name) {
		t.Fatal("a, which b yielded to and which fits, was not woken")
	}
	pl.PostFilter(t.Context(), framework.NewCycleState(), younger[1], nil) // the filters found no node for it
	time.Sleep(100 * time.Millisecond)                                     // activation runs in a goroutine
	if h.wasActivated(younger[0].Name) || h.wasActivated(younger[2].Name) {
		t.Fatalf("b woke itself: activated %v", h.activated)
	}
}

// A job short of room is woken when a group released from the barrier frees
// room, which no pod event announces.
func TestAJobShortOfRoomIsWokenWhenAGroupIsReleased(t *testing.T) {
	older, younger, r := olderAndYounger("a", "b")
	h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 3)})}
	pl := gang.NewWithRegistry(h, r, 30*time.Second)
	refuse(t, pl, older[0], "a should not fit 3 slots")
	time.Sleep(100 * time.Millisecond) // activation runs in a goroutine
	if h.wasActivated(older[0].Name) {
		t.Fatal("a was woken before any room came free")
	}
	pl.Unreserve(t.Context(), nil, younger[0], "n1") // b's group leaves the barrier
	if !h.activatedSoon(older[0].Name) {
		t.Fatal("a was not woken when b's group was released")
	}
}

// A job that yielded to an older one is woken when the older one stops
// holding room for it: here the older job no longer fits (another scheduler's
// pod took the room, an event the younger job's queueing hint skips), so it
// holds no room and the younger one, which now fits, must get another try
// rather than wait for an unrelated event or the queue's 5-minute flush.
func TestAYieldedJobIsWokenWhenTheOlderOneStopsHoldingRoom(t *testing.T) {
	older, younger, r := olderAndYounger("a", "b")
	h := &fakeHandle{snapshot: schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 6)})}
	pl := gang.NewWithRegistry(h, r, 30*time.Second)
	refuse(t, pl, younger[0], "b should yield to a")
	h.snapshot = schedcache.NewSnapshot(nil, []*v1.Node{node("n1", 3)}) // the room shrinks
	refuse(t, pl, older[0], "a should not fit any more")
	if !h.activatedSoon(younger[0].Name) {
		t.Fatal("b fits now but was never woken")
	}
	if _, s := pl.PreFilter(t.Context(), framework.NewCycleState(), younger[0], nil); !s.IsSuccess() {
		t.Fatalf("b: PreFilter = %v, want Success", s)
	}
}

// An extra pod of a placed job does not take the room that another job's
// minimum group at the barrier still needs: the group's last pod would find no
// node and the group would be released. It is woken when that group is placed.
func TestAnExtraLeavesTheRoomAGroupAtTheBarrierNeeds(t *testing.T) {
	tests := []struct {
		name      string
		slots     int64 // one node; job a's group (3) is bound, job b has 2 of its 3 waiting
		bWaiting  bool
		wantExtra fwk.Code
	}{
		{"room for both", 7, true, fwk.Success},
		{"room for b's last pod only", 6, true, fwk.Unschedulable},
		{"no group at the barrier", 6, false, fwk.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := jobPods("a", 4, 3), jobPods("b", 3, 3)
			bind(a[:3], "n1")
			r := testutil.Observed(append(append([]*v1.Pod{}, a...), b...)...)
			h := &fakeHandle{}
			occupied := append([]*v1.Pod{}, a[:3]...)
			if tt.bWaiting {
				for _, p := range b[:2] {
					h.waiting = append(h.waiting, &fakeWaiting{pod: p, state: "waiting"})
					assumed := p.DeepCopy()
					assumed.Spec.NodeName = "n1" // assumed on the node while it waits
					occupied = append(occupied, assumed)
				}
			}
			h.snapshot = schedcache.NewSnapshot(occupied, []*v1.Node{node("n1", tt.slots)})
			pl := gang.NewWithRegistry(h, r, time.Second)
			state := framework.NewCycleState()
			_, s := pl.PreFilter(t.Context(), state, a[3], nil)
			if s.Code() != tt.wantExtra {
				t.Fatalf("extra: PreFilter = %v, want %v", s, tt.wantExtra)
			}
			if s.IsSuccess() {
				return
			}
			pl.PostFilter(t.Context(), state, a[3], nil)
			for _, w := range h.waiting {
				if w.state != "waiting" {
					t.Fatalf("%s was %s: the extra's refusal touched b's group", w.pod.Name, w.state)
				}
			}
			if s, _ := pl.Permit(t.Context(), nil, b[2], "n1"); !s.IsSuccess() {
				t.Fatalf("b's last pod: Permit = %v", s)
			}
			if !h.activatedSoon(a[3].Name) {
				t.Fatal("the extra was not woken when b's group was placed")
			}
		})
	}
}

// olderAndYounger makes an older job of 4 pods (minimum group 4) and, a second
// later, a younger one of 3 (minimum group 3), both observed.
// refuse runs a scheduling cycle of pod that PreFilter refuses, through
// PostFilter, as the framework would.
func refuse(t *testing.T, pl *gang.Plugin, pod *v1.Pod, why string) {
	t.Helper()
	state := framework.NewCycleState()
	if _, s := pl.PreFilter(t.Context(), state, pod, nil); s.IsSuccess() {
		t.Fatal(why)
	}
	pl.PostFilter(t.Context(), state, pod, nil)
}

func olderAndYounger(old, young string) ([]*v1.Pod, []*v1.Pod, *jobs.Registry) {
	older, younger := jobPods(old, 4, 4), jobPods(young, 3, 3)
	return older, younger, observedInOrder(older, younger)
}

// observedInOrder is a registry of two jobs, the first created a second
// before the second.
func observedInOrder(older, younger []*v1.Pod) *jobs.Registry {
	t0 := time.Unix(1000, 0)
	r := jobs.NewRegistry()
	for _, p := range older {
		p.CreationTimestamp = metav1.NewTime(t0)
		r.Observe(p)
	}
	for _, p := range younger {
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
		r.Observe(p)
	}
	return r
}

// Backfill lets younger jobs take the room an older job's group cannot use
// yet. After the starvation bound the older job's room is held for it as it
// frees: younger groups and other jobs' extras wait (in `coach cluster
// compare --seed 2`, a 5-pod job waited 26 s while 7 younger jobs started).
func TestAStarvedJobHoldsTheRoomItNeeds(t *testing.T) {
	tests := []struct {
		name       string
		waited     time.Duration // by the older job, a
		starvation time.Duration
		aPods      int  // a's minimum group; the node has 6 slots, 3 of them free
		extra      bool // the pod asking is an extra of a running job c, not b's group
		want       fwk.Code
	}{
		{"not starved yet: b backfills", 5 * time.Second, 30 * time.Second, 4, false, fwk.Success},
		{"starved: b waits", time.Minute, 30 * time.Second, 4, false, fwk.Unschedulable},
		{"no bound: b backfills", time.Hour, 0, 4, false, fwk.Success},
		{"starved but larger than the cluster: b backfills", time.Minute, 30 * time.Second, 7, false, fwk.Success},
		{"not starved yet: c's extra goes", 5 * time.Second, 30 * time.Second, 4, true, fwk.Success},
		{"starved: c's extra waits", time.Minute, 30 * time.Second, 4, true, fwk.Unschedulable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Now().Add(-tt.waited)
			a, c, b := jobPods("a", tt.aPods, tt.aPods), jobPods("c", 4, 3), jobPods("b", 3, 3)
			bind(c[:3], "n1")
			r := jobs.NewRegistry()
			for i, pods := range [][]*v1.Pod{a, c, b} { // a first, then c, then b
				for _, p := range pods {
					p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(i) * time.Second))
					r.Observe(p)
				}
			}
			h := &fakeHandle{snapshot: schedcache.NewSnapshot(c[:3], []*v1.Node{node("n1", 6)})}
			pl := gang.NewWithRegistry(h, r, 30*time.Second).WithStarvation(tt.starvation)
			pod := b[0]
			if tt.extra {
				pod = c[3]
			}
			_, s := pl.PreFilter(t.Context(), framework.NewCycleState(), pod, nil)
			if s.Code() != tt.want {
				t.Fatalf("PreFilter = %v, want %v", s, tt.want)
			}
			if tt.want != fwk.Success && !strings.Contains(s.Message(), "job default/a ahead of it has waited") {
				t.Fatalf("the refusal does not name the starved job: %q", s.Message())
			}
		})
	}
}
