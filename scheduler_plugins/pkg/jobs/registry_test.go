package jobs_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/coach/scheduler_plugins/pkg/jobs"
	"github.com/coach/scheduler_plugins/pkg/testutil"
)

func TestMemberOf(t *testing.T) {
	tests := []struct {
		name     string
		pod      *v1.Pod
		member   bool
		minGroup int
	}{
		{"coach worker", testutil.MakePod().Name("a").Job("j", jobs.RoleWorker, 4).Obj(), true, 4},
		{"no labels", testutil.MakePod().Name("a").Obj(), false, 0},
		{"job label only", testutil.MakePod().Name("a").Label(jobs.LabelJob, "j").Obj(), false, 0},
		{"unknown role", testutil.MakePod().Name("a").Label(jobs.LabelJob, "j").Label(jobs.LabelRole, "chief").Obj(), false, 0},
		{"bad min-group defaults", testutil.MakePod().Name("a").Job("j", jobs.RoleServer, 0).Obj(), true, jobs.DefaultMinGroup},
		// a group needs one pod of each role: 1 let a lone worker through the barrier
		{"min-group below the three roles counts as 3", testutil.MakePod().Name("a").Job("j", jobs.RoleServer, 1).Obj(), true, 3},
		{"name looks like coach but no labels", testutil.MakePod().Name("coach-j-worker-0").Obj(), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := jobs.MemberOf(tt.pod)
			if ok != tt.member || (ok && m.MinGroup != tt.minGroup) || m.BadMinGroup != "" {
				t.Fatalf("MemberOf = %+v, %v; want member=%v minGroup=%d", m, ok, tt.member, tt.minGroup)
			}
		})
	}
}

func annotated(name, minGroup string) *v1.Pod {
	pod := testutil.MakePod().Name(name).Job("j", jobs.RoleWorker, 3).Obj()
	pod.Annotations[jobs.AnnotationMinGroup] = minGroup
	return pod
}

// A min-group that is not a whole number was read as 3: a static 10-pod job
// annotated "10 " bound 3 pods and left 7 waiting, without a word.
func TestMemberOfNamesAMinGroupItCannotRead(t *testing.T) {
	unannotated := testutil.MakePod().Name("a").Job("j", jobs.RoleWorker, 3).Obj()
	delete(unannotated.Annotations, jobs.AnnotationMinGroup)
	tests := []struct {
		name     string
		pod      *v1.Pod
		minGroup int
		bad      string
	}{
		{"none", unannotated, 3, ""},
		{"plus sign", annotated("a", "+5"), 5, ""},
		{"trailing space", annotated("a", "10 "), 3, `annotation coach.io/min-group is "10 ", not a whole number of pods`},
		{"exponent", annotated("a", "1e1"), 3, `"1e1"`},
		{"decimal", annotated("a", "10.0"), 3, `"10.0"`},
		{"beyond int64", annotated("a", "99999999999999999999"), 3, `"99999999999999999999"`},
		{"empty", annotated("a", ""), 3, `is "", not`},
		{"long, shown cut", annotated("a", strings.Repeat("x", 1000)), 3, `"` + strings.Repeat("x", 40) + `…", not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := jobs.MemberOf(tt.pod)
			if !ok || m.MinGroup != tt.minGroup || (tt.bad == "") != (m.BadMinGroup == "") || !strings.Contains(m.BadMinGroup, tt.bad) {
				t.Fatalf("MemberOf = %+v, %v; want minGroup=%d, BadMinGroup with %q", m, ok, tt.minGroup, tt.bad)
			}
		})
	}
}

func TestAJobViewNamesAPodWhoseMinGroupCannotBeRead(t *testing.T) {
	good, bad := annotated("w0", "4"), annotated("w1", "4 ")
	r := testutil.Observed(good, bad)
	if v, _ := r.View(jobs.Key{Namespace: "default", Name: "j"}); v.BadMinGroup != `pod w1: annotation coach.io/min-group is "4 ", not a whole number of pods` {
		t.Fatalf("BadMinGroup = %q", v.BadMinGroup)
	}
	r.Observe(annotated("w1", "4")) // fixed: the job goes on
	if v, _ := r.View(jobs.Key{Namespace: "default", Name: "j"}); v.BadMinGroup != "" || v.MinGroup != 4 {
		t.Fatalf("after the fix: %+v", v)
	}
}

func TestRegistryView(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sched := testutil.MakePod().Name("s").Job("j", jobs.RoleScheduler, 3).Created(t0).Req(100, 64).Obj()
	server := testutil.MakePod().Name("p").Job("j", jobs.RoleServer, 3).Created(t0).Req(200, 64).Node("n1").Obj()
	worker := testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Created(t0).Req(300, 64).Obj()
	tests := []struct {
		name                          string
		pods                          []*v1.Pod
		forget                        []*v1.Pod
		permit                        []*v1.Pod
		wantPods, wantBound, wantPerm int
		wantMissing                   int
		wantExists                    bool
	}{
		{"empty", nil, nil, nil, 0, 0, 0, 3, false},
		{"all roles", []*v1.Pod{sched, server, worker}, nil, nil, 3, 1, 0, 0, true},
		{"permitted counts as placed", []*v1.Pod{sched, server, worker}, nil, []*v1.Pod{worker}, 3, 1, 1, 0, true},
		{"forgotten pod", []*v1.Pod{sched, server, worker}, []*v1.Pod{worker}, nil, 2, 1, 0, 1, true},
		{"terminating is gone", []*v1.Pod{sched, server, testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Terminating().Obj()}, nil, nil, 2, 1, 0, 1, true},
		{"job forgotten with its last pod", []*v1.Pod{sched}, []*v1.Pod{sched}, nil, 0, 0, 0, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testutil.Observed(tt.pods...)
			for _, p := range tt.permit {
				r.MarkPermitted(p)
			}
			for _, p := range tt.forget {
				r.Forget(p)
			}
			v, ok := r.View(jobs.Key{Namespace: "default", Name: "j"})
			if ok != tt.wantExists || v.Pods != tt.wantPods || v.Bound != tt.wantBound || v.Permitted != tt.wantPerm || len(v.MissingRoles()) != tt.wantMissing {
				t.Fatalf("View = %+v exists=%v", v, ok)
			}
			if !tt.wantExists && r.Jobs() != 0 {
				t.Fatalf("registry still holds %d jobs", r.Jobs())
			}
		})
	}
}

func TestOrderKeyIsStableAndFIFO(t *testing.T) {
	r := jobs.NewRegistry()
	t0 := time.Unix(1000, 0)
	a := testutil.MakePod().Name("z-a").Job("a", jobs.RoleWorker, 3).Created(t0).Obj()
	b := testutil.MakePod().Name("a-b").Job("b", jobs.RoleWorker, 3).Created(t0).Obj()
	r.Observe(a)
	r.Observe(b)
	if !r.Order(a).Less(r.Order(b)) {
		t.Fatal("job a, seen first in the same second, must sort before job b")
	}
	// a later pod of job a still sorts with job a, before job b
	a2 := testutil.MakePod().Name("z-a2").Job("a", jobs.RoleServer, 3).Created(t0.Add(5 * time.Second)).Obj()
	if !r.Order(a2).Less(r.Order(b)) {
		t.Fatal("a later pod of an earlier job must sort before a later job")
	}
}

// An older sibling seen after a younger one does not move its job in the
// queue: the heap holds the job's pods by the key they had, and a key that
// moved made Less inconsistent (a restarted scheduler lists pods by name).
func TestAnOlderSiblingSeenLateDoesNotMoveItsJob(t *testing.T) {
	r := jobs.NewRegistry()
	t0 := time.Unix(1000, 0)
	aWorker := testutil.MakePod().Name("a-worker").Job("a", jobs.RoleWorker, 3).Created(t0.Add(10 * time.Second)).Obj()
	b := testutil.MakePod().Name("b-0").Job("b", jobs.RoleWorker, 3).Created(t0.Add(5 * time.Second)).Obj()
	before := r.Order(aWorker).Less(r.Order(b))
	r.Observe(testutil.MakePod().Name("a-sched").Job("a", jobs.RoleScheduler, 3).Created(t0).Obj())
	if after := r.Order(aWorker).Less(r.Order(b)); after != before {
		t.Fatalf("Less(a-worker, b-0) was %v, is now %v", before, after)
	}
}

// A copy of a pod from before its binding, delivered late, does not unbind it:
// a bound pod's node never changes, and no later update would correct the
// record on a cluster without kubelets.
func TestAStaleUnboundCopyDoesNotUnbindAPod(t *testing.T) {
	tests := []struct {
		name      string
		copies    []*v1.Pod
		wantBound int
	}{
		{"bound, then the older unbound copy",
			[]*v1.Pod{testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Node("n1").Obj(),
				testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Obj()}, 1},
		{"unbound, then bound",
			[]*v1.Pod{testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Obj(),
				testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Node("n1").Obj()}, 1},
		{"unbound only", []*v1.Pod{testutil.MakePod().Name("w").Job("j", jobs.RoleWorker, 3).Obj()}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jobs.NewRegistry()
			for _, p := range tt.copies {
				r.Observe(p)
			}
			if v, _ := r.View(jobs.Key{Namespace: "default", Name: "j"}); v.Bound != tt.wantBound || v.Pods != 1 {
				t.Fatalf("View = %+v, want %d bound of 1 pod", v, tt.wantBound)
			}
		})
	}
}

// TestRegistryConcurrent exercises the registry from many goroutines, as the
// informer, the scheduling cycle and binding goroutines do; it must neither
// crash nor keep jobs that are gone.
func TestRegistryConcurrent(t *testing.T) {
	r := jobs.NewRegistry()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				p := testutil.MakePod().Name(fmt.Sprintf("p-%d-%d", g, i)).Job(fmt.Sprintf("j%d", i%7), jobs.RoleWorker, 2).Obj()
				r.Observe(p)
				r.MarkPermitted(p)
				_ = r.Order(p)
				_, _ = r.View(jobs.Key{Namespace: "default", Name: "j1"})
				r.Unpermit(p)
				r.Forget(p)
			}
		}(g)
	}
	wg.Wait()
	if n := r.Jobs(); n != 0 {
		t.Fatalf("registry keeps %d jobs after all pods are gone", n)
	}
}

// Pods with Coach's labels that another scheduler places are none of the
// gang's business: a pending one made every younger coach-gang job yield to
// it for as long as it stayed pending.
func TestRegistryTracksOnlyThisSchedulersPods(t *testing.T) {
	r := jobs.NewRegistry()
	other := testutil.MakePod().Name("d").Job("d", jobs.RoleWorker, 3).Obj()
	other.Spec.SchedulerName = "default-scheduler"
	r.Observe(other)
	if _, ok := r.View(jobs.Key{Namespace: "default", Name: "d"}); ok || r.Jobs() != 0 {
		t.Fatalf("another scheduler's pod is tracked (%d jobs)", r.Jobs())
	}
	if k := r.Order(other); k.Job != "default/d" { // and the queue sort still orders it
		t.Fatalf("Order = %+v", k)
	}
}

// A job's minimum group must not depend on which of its pods was seen last.
func TestMinGroupIsTheLargestOfTheLivePods(t *testing.T) {
	a0 := testutil.MakePod().Name("a0").Job("a", jobs.RoleWorker, 5).Obj()
	a1 := testutil.MakePod().Name("a1").Job("a", jobs.RoleWorker, 3).Obj()
	tests := []struct {
		name    string
		observe []*v1.Pod
		forget  []*v1.Pod
		want    int
	}{
		{"larger first", []*v1.Pod{a0, a1}, nil, 5},
		{"larger last", []*v1.Pod{a1, a0}, nil, 5},
		{"seen again", []*v1.Pod{a0, a1, a0, a1}, nil, 5},
		{"the larger one gone", []*v1.Pod{a0, a1}, []*v1.Pod{a0}, 3},
		{"the smaller one gone", []*v1.Pod{a0, a1}, []*v1.Pod{a1}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testutil.Observed(tt.observe...)
			for _, p := range tt.forget {
				r.Forget(p)
			}
			if v, _ := r.View(jobs.Key{Namespace: "default", Name: "a"}); v.MinGroup != tt.want {
				t.Fatalf("MinGroup = %d, want %d", v.MinGroup, tt.want)
			}
		})
	}
}

// A pod whose labels change is forgotten where it was recorded: before, it
// stayed in its old job for good, counting towards its roles and pods.
func TestARelabelledPodLeavesItsOldJob(t *testing.T) {
	tests := []struct {
		name   string
		change func(*v1.Pod)
		wantB  int // pods of job b afterwards
	}{
		{"job label removed", func(p *v1.Pod) { delete(p.Labels, jobs.LabelJob) }, 0},
		{"unknown role", func(p *v1.Pod) { p.Labels[jobs.LabelRole] = "chief" }, 0},
		{"moved to job b", func(p *v1.Pod) { p.Labels[jobs.LabelJob] = "b" }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jobs.NewRegistry()
			pod := testutil.MakePod().Name("w").Job("a", jobs.RoleWorker, 3).Obj()
			r.Observe(pod)
			changed := pod.DeepCopy()
			tt.change(changed)
			r.Observe(changed)
			if _, ok := r.View(jobs.Key{Namespace: "default", Name: "a"}); ok {
				t.Fatal("job a still holds the pod")
			}
			if v, _ := r.View(jobs.Key{Namespace: "default", Name: "b"}); v.Pods != tt.wantB {
				t.Fatalf("job b has %d pods, want %d", v.Pods, tt.wantB)
			}
			r.Forget(changed)
			if r.Jobs() != 0 {
				t.Fatalf("%d jobs tracked after the pod is gone", r.Jobs())
			}
		})
	}
}

// The queue and the plugins observe their own copies of pods; a stale copy of
// a pod that is gone must not bring it back (and its job with it, for good).
func TestAPodThatIsGoneStaysGone(t *testing.T) {
	pod := testutil.MakePod().Name("w").Job("a", jobs.RoleWorker, 3).Obj()
	tests := []struct {
		name string
		gone func(*jobs.Registry)
	}{
		{"deleted", func(r *jobs.Registry) { r.Delete(pod) }},
		{"seen terminating", func(r *jobs.Registry) {
			r.Observe(testutil.MakePod().Name("w").Job("a", jobs.RoleWorker, 3).Terminating().Obj())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jobs.NewRegistry()
			r.Observe(pod)
			tt.gone(r)
			r.Observe(pod)   // the stale copy
			_ = r.Order(pod) // which the queue sort observes too
			if r.Jobs() != 0 {
				t.Fatalf("%d jobs tracked after the pod is gone", r.Jobs())
			}
		})
	}
}

// Jobs ahead in the queue come first first, as the queue sorts them: a higher
// priority before an older arrival. The gang reserves their room in this order.
func TestAheadUnplacedFollowsTheQueue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		priorities map[string]int32 // by job; 0 if not given
		want       string
	}{
		{"same priority: oldest first", nil, "[c a d b]"},
		{"a younger job of higher priority is ahead", map[string]int32{"b": 10, "d": 5}, "[b d c a]"},
		{"an older job of lower priority is not", map[string]int32{"young": 10, "a": 10}, "[a]"},
		{"negative priorities are behind", map[string]int32{"c": -1, "a": -1}, "[d b]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jobs.NewRegistry()
			for i, job := range []string{"c", "a", "d", "b", "young"} { // arrival order
				for _, role := range jobs.AllRoles {
					r.Observe(testutil.MakePod().Name(job+"-"+string(role)).Job(job, role, 3).
						Created(t0.Add(time.Duration(i) * time.Second)).Priority(tt.priorities[job]).Obj())
				}
			}
			var got []string
			for _, v := range r.AheadUnplaced(jobs.Key{Namespace: "default", Name: "young"}) {
				got = append(got, v.Key.Name)
			}
			if fmt.Sprint(got) != tt.want {
				t.Fatalf("AheadUnplaced = %v, want %v", got, tt.want)
			}
		})
	}
}

// A job whose pods disagree on priority is as far ahead as its lowest pod:
// the queue sorts each pod by its own, and the group starts with its last.
func TestAJobIsAsFarAheadAsItsLowestPriorityPod(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := jobs.NewRegistry()
	for _, role := range jobs.AllRoles {
		prio := int32(0)
		if role == jobs.RoleScheduler {
			prio = 10
		}
		r.Observe(testutil.MakePod().Name("mixed-"+string(role)).Job("mixed", role, 3).Created(t0).Priority(prio).Obj())
		r.Observe(testutil.MakePod().Name("young-"+string(role)).Job("young", role, 3).Created(t0.Add(time.Second)).Priority(5).Obj())
	}
	if got := r.AheadUnplaced(jobs.Key{Namespace: "default", Name: "young"}); len(got) != 0 {
		t.Fatalf("AheadUnplaced(young) = %v, want none: mixed's workers sort behind young's pods", got)
	}
	if got := r.AheadUnplaced(jobs.Key{Namespace: "default", Name: "mixed"}); len(got) != 1 {
		t.Fatalf("AheadUnplaced(mixed) = %v, want young", got)
	}
	// once its low-priority pods are bound, the rest of the group sorts by its own priority
	for _, role := range []jobs.Role{jobs.RoleServer, jobs.RoleWorker} {
		r.Observe(testutil.MakePod().Name("mixed-"+string(role)).Job("mixed", role, 3).Created(t0).Priority(0).Node("n1").Obj())
	}
	if got := r.AheadUnplaced(jobs.Key{Namespace: "default", Name: "young"}); len(got) != 1 {
		t.Fatalf("AheadUnplaced(young) = %v, want mixed: its unbound scheduler pod has priority 10", got)
	}
}
