-- Valid queries: the mutation tests delete, duplicate, swap and truncate
-- their tokens. Event names are quoted so each is one token.
SELECT fd, COUNT(*) FROM "tracepoint/syscalls/sys_enter_pread64" GROUP BY fd WHERE pid == 7 WINDOW(time, 1000, 1000)
SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM "tracepoint/syscalls/sys_enter_pread64" GROUP BY fd, cpu WHERE pid == 1041370 WINDOW(time, 1000, 1000);
SELECT fd, SUM(count) AS bytes FROM "tracepoint/syscalls/sys_enter_pread64" WHERE pid = 3 AND fd > 2 GROUP BY fd HAVING SUM(count) > 10 ORDER BY bytes DESC LIMIT 5
SELECT comm, COUNT(*) FROM "tracepoint/syscalls/sys_enter_pread64" WHERE comm = 'db' OR comm <> 'x' GROUP BY comm WINDOW(count, 100, 100)
SELECT fd, pos FROM "tracepoint/syscalls/sys_enter_pread64" WHERE fd IN (3, 4, 5) AND count BETWEEN 1 AND 4096 LIMIT 10
SELECT prev_comm, next_pid FROM "tracepoint:sched:sched_switch" WHERE prev_pid <> 0 AND prev_state = 1
SELECT next_comm, MIN(next_prio), MAX(prev_prio) FROM "tracepoint/sched/sched_switch" GROUP BY next_comm WINDOW(time, 500, 500)
SELECT fd % 2 AS parity, COUNT(*) FROM "tracepoint/syscalls/sys_enter_pread64" WHERE (fd & 1) = 0 OR pos >= 4096 GROUP BY fd % 2
SELECT time, pid, tid, cpu, uid, gid FROM "tracepoint/syscalls/sys_enter_pread64" WHERE NOT (pid = 1) AND count * 2 < 8192
SELECT CASE WHEN fd > 2 THEN 'file' ELSE 'std' END AS kind, COUNT(*) FROM "tracepoint/syscalls/sys_enter_pread64" GROUP BY 1 WINDOW(time, 1000, 1000)
SELECT fd, count / 512 FROM "tracepoint/syscalls/sys_enter_pread64" WHERE comm LIKE 'post%' AND pos IS NOT NULL ORDER BY fd
SELECT COUNT(DISTINCT fd), cgroup FROM "tracepoint/syscalls/sys_enter_pread64" GROUP BY cgroup WINDOW(count, 1000, 1000)
SELECT fd, COUNT(*) FROM "tracepoint/syscalls/sys_enter_pread64" WHERE pid == 42 GROUP BY fd ORDER BY COUNT(*) DESC LIMIT 3 WINDOW(time, 2000, 2000)
SELECT upper(comm), fd + 1 FROM "tracepoint/syscalls/sys_enter_pread64" WHERE length(comm) > 3
SELECT prev_pid, next_pid FROM "tracepoint/sched/sched_switch" WHERE prev_comm <> next_comm AND -prev_prio < 0
