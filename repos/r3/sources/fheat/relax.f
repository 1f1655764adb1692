C     Fixed-form FORTRAN 77: a relaxation sweep with its weight in COMMON and a
C     call counter SAVEd between calls.
      SUBROUTINE RELAX(N, X)
      INTEGER N
      DOUBLE PRECISION X(N)
      DOUBLE PRECISION W, ACC
      COMMON /RLXPAR/ W, ACC
      INTEGER CALLS
      SAVE CALLS
      DATA CALLS /0/
      INTEGER I
      CALLS = CALLS + 1
      DO 10 I = 2, N - 1
         X(I) = (1D0 - W) * X(I) + W * 0.5D0 * (X(I-1) + X(I+1))
   10 CONTINUE
      ACC = ACC + X(N / 2) + CALLS
      END
