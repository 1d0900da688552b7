"""What runs inside a role function (MXNet scheduler, parameter server, worker).

protocol.py  the JSON an invocation carries and answers, validated field by field
function.py  the Nuclio-facing runtime: keeps a warm role process, runs one epoch per event
runner.py    the warm role process itself (imports MXNet once, then runs one role)
attempt_files.py  the files beside an attempt's abort marker: running processes, charges, and
                  the loop's marker that every worker has answered
"""
