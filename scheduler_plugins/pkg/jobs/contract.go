// Package jobs holds what every Coach plugin shares: the pod contract (which
// labels and annotations make a pod a Coach function pod) and the Registry, a
// concurrency-safe view of each job's pods fed by the scheduler's pod informer.
package jobs

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
)

// The pod contract. Coach's kube backend sets these on every function pod;
// pods are recognised by labels only, never by name.
const (
	// LabelJob names the job a pod belongs to (unique within a namespace).
	LabelJob = "coach.io/job"
	// LabelRole is the pod's parameter-server role: scheduler, server or worker.
	LabelRole = "coach.io/role"
	// AnnotationMinGroup is the number of the job's pods that must start
	// together (at least one of each role; all of them for a static job).
	// A group always holds one pod of each role, so a value under 3 counts
	// as 3: a parameter-server job cannot start with less. A value that is
	// not a whole number holds the job back, with a reason that names it:
	// read as 3, it let 3 pods of a static 10-pod job bind without a word.
	AnnotationMinGroup = "coach.io/min-group"
	// SchedulerName is the schedulerName that sends a pod to coach-scheduler.
	SchedulerName = "coach-gang"
)

// Role is a parameter-server role.
type Role string

// The three roles an MXNet parameter-server job needs before it can start.
const (
	RoleScheduler Role = "scheduler"
	RoleServer    Role = "server"
	RoleWorker    Role = "worker"
)

// AllRoles lists the roles a job must have (thesis Algorithm 2).
var AllRoles = []Role{RoleScheduler, RoleServer, RoleWorker}

// DefaultMinGroup applies when the annotation is missing, invalid or below
// it: one pod of each role, the least that lets a parameter-server job start.
const DefaultMinGroup = 3

// Key identifies a job: namespace and the value of LabelJob.
type Key struct {
	Namespace string
	Name      string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Member is what the contract says about one pod.
type Member struct {
	Job      Key
	Role     Role
	MinGroup int
	// BadMinGroup says why the pod's min-group annotation cannot be read
	// ("" if it can, or if there is none).
	BadMinGroup string
}

// MemberOf reports whether pod is a Coach function pod and, if so, its job,
// role and minimum group. A pod with a job label but an unknown role is not a
// member: it passes through the plugins untouched like any other pod.
func MemberOf(pod *v1.Pod) (Member, bool) {
	job, ok := pod.Labels[LabelJob]
	if !ok || job == "" {
		return Member{}, false
	}
	role := Role(pod.Labels[LabelRole])
	switch role {
	case RoleScheduler, RoleServer, RoleWorker:
	default:
		return Member{}, false
	}
	text, given := pod.Annotations[AnnotationMinGroup]
	minGroup, bad := parseMinGroup(text, given)
	return Member{
		Job:         Key{Namespace: pod.Namespace, Name: job},
		Role:        role,
		MinGroup:    minGroup,
		BadMinGroup: bad,
	}, true
}

func parseMinGroup(text string, given bool) (int, string) {
	if !given {
		return DefaultMinGroup, ""
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		if len(text) > 40 {
			text = text[:40] + "…"
		}
		return DefaultMinGroup, fmt.Sprintf("annotation %s is %q, not a whole number of pods", AnnotationMinGroup, text)
	}
	return max(n, DefaultMinGroup), ""
}
