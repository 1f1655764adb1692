; The fixed part of replay's trampoline module (replay/module.py: trampoline() adds the
; kernel's declaration and __r3_call, which loads its arguments from slots and calls it).
; A string.Template: $${arena_base}/$${arena_end} bound the recorded arena, whose memory a
; kernel's free must leave alone.

; __r3_replay_free(p): free() of memory outside the arena only (recorded memory is not
; the replay process's to free); the sized form serves C++'s sized operator delete.
declare void @free(ptr)
define void @${replay_free}(ptr %p) {
  %i = ptrtoint ptr %p to i64
  %lo = icmp uge i64 %i, ${arena_base}
  %hi = icmp ult i64 %i, ${arena_end}
  %in = and i1 %lo, %hi
  br i1 %in, label %skip, label %real
real:
  call void @free(ptr %p)
  ret void
skip:
  ret void
}
define void @${replay_free_sized}(ptr %p, i64 %n) {
  call void @${replay_free}(ptr %p)
  ret void
}

; __r3_timed(slots, ret, n): n calls back to back, timed here rather than around a
; ctypes call, whose few hundred nanoseconds would hide a short kernel's own time.
declare i32 @clock_gettime(i32, ptr)
define i64 @__r3_timed(ptr %slots, ptr %ret, i64 %n) {
entry:
  %t0 = alloca [2 x i64], align 8
  %t1 = alloca [2 x i64], align 8
  call i32 @clock_gettime(i32 1, ptr %t0)
  %none = icmp eq i64 %n, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  call void @__r3_call(ptr %slots, ptr %ret)
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  call i32 @clock_gettime(i32 1, ptr %t1)
  %s0 = load i64, ptr %t0, align 8
  %s1 = load i64, ptr %t1, align 8
  %q0 = getelementptr i64, ptr %t0, i64 1
  %q1 = getelementptr i64, ptr %t1, i64 1
  %n0 = load i64, ptr %q0, align 8
  %n1 = load i64, ptr %q1, align 8
  %ds = sub i64 %s1, %s0
  %dsns = mul i64 %ds, 1000000000
  %dn = sub i64 %n1, %n0
  %ns = add i64 %dsns, %dn
  ret i64 %ns
}

; __r3_sequence(calls, n): for each of n recorded calls {slots, ret, copies, ncopies},
; its copies {dst, src, len} put back, then the call timed alone; the timed spans' sum.
; In native code: Python between two calls would evict what the kernel left in cache.
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
define i64 @__r3_sequence(ptr %calls, i64 %n) {
entry:
  %u0 = alloca [2 x i64], align 8
  %u1 = alloca [2 x i64], align 8
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %inext, %timed ]
  %acc = phi i64 [ 0, %entry ], [ %acc2, %timed ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %c = getelementptr [4 x i64], ptr %calls, i64 %i
  %cpsp = getelementptr i64, ptr %c, i64 2
  %cps = load ptr, ptr %cpsp, align 8
  %ncp = getelementptr i64, ptr %c, i64 3
  %nc = load i64, ptr %ncp, align 8
  br label %chead
chead:
  %j = phi i64 [ 0, %body ], [ %jnext, %cbody ]
  %cmore = icmp ult i64 %j, %nc
  br i1 %cmore, label %cbody, label %timed
cbody:
  %cp = getelementptr [3 x i64], ptr %cps, i64 %j
  %dst = load ptr, ptr %cp, align 8
  %srcp = getelementptr i64, ptr %cp, i64 1
  %src = load ptr, ptr %srcp, align 8
  %lenp = getelementptr i64, ptr %cp, i64 2
  %len = load i64, ptr %lenp, align 8
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %len, i1 false)
  %jnext = add i64 %j, 1
  br label %chead
timed:
  %slots = load ptr, ptr %c, align 8
  %retp = getelementptr i64, ptr %c, i64 1
  %ret = load ptr, ptr %retp, align 8
  call i32 @clock_gettime(i32 1, ptr %u0)
  call void @__r3_call(ptr %slots, ptr %ret)
  call i32 @clock_gettime(i32 1, ptr %u1)
  %a0 = load i64, ptr %u0, align 8
  %a1 = load i64, ptr %u1, align 8
  %b0p = getelementptr i64, ptr %u0, i64 1
  %b1p = getelementptr i64, ptr %u1, i64 1
  %b0 = load i64, ptr %b0p, align 8
  %b1 = load i64, ptr %b1p, align 8
  %da = sub i64 %a1, %a0
  %dans = mul i64 %da, 1000000000
  %db = sub i64 %b1, %b0
  %d = add i64 %dans, %db
  %acc2 = add i64 %acc, %d
  %inext = add i64 %i, 1
  br label %head
done:
  ret i64 %acc
}
