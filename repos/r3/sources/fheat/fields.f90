! The heat field and its kernels: module allocatables, an assumed-shape kernel,
! and a call into C (field_norm) through bind(c).
module fields
  use iso_c_binding, only: c_double, c_int
  implicit none
  real(8), allocatable :: t(:,:), tn(:,:)
  integer :: nx, ny

  interface
    real(c_double) function field_norm(a, m, n) bind(c, name="field_norm")
      import :: c_double, c_int
      integer(c_int), value :: m, n
      real(c_double), intent(in) :: a(m, n)
    end function
  end interface

contains

  subroutine setup(m, n)
    integer, intent(in) :: m, n
    integer :: i, j
    nx = m; ny = n
    allocate(t(nx, ny), tn(nx, ny))
    do j = 1, ny
      do i = 1, nx
        t(i, j) = 0d0
      end do
    end do
    t(1, :) = 100d0          ! a hot wall
    t(:, 1) = 50d0
    tn = t
  end subroutine

  ! One explicit step on the module's arrays; the new field becomes the current one.
  subroutine diffuse(alpha)
    real(8), intent(in) :: alpha
    integer :: i, j
    do j = 2, ny - 1
      do i = 2, nx - 1
        tn(i, j) = t(i, j) + alpha * (t(i-1, j) + t(i+1, j) + t(i, j-1) + t(i, j+1) - 4d0 * t(i, j))
      end do
    end do
    t = tn
  end subroutine

  ! A smoothing pass over any 2-D section: the dummies are descriptors.
  subroutine smooth(a, b)
    real(8), intent(in) :: a(:, :)
    real(8), intent(inout) :: b(:, :)
    integer :: i, j
    do j = 2, size(a, 2) - 1
      do i = 2, size(a, 1) - 1
        b(i, j) = 0.5d0 * a(i, j) + 0.125d0 * (a(i-1, j) + a(i+1, j) + a(i, j-1) + a(i, j+1))
      end do
    end do
  end subroutine

  ! A blur written row by row, as one would in C: in column-major Fortran the inner
  ! loop strides across columns (an interchange makes it walk down them).
  subroutine blur(a, b)
    real(8), intent(in) :: a(:, :)
    real(8), intent(inout) :: b(:, :)
    integer :: i, j
    do i = 2, size(a, 1) - 1
      do j = 2, size(a, 2) - 1
        b(i, j) = 0.25d0 * (a(i-1, j) + a(i+1, j)) + 0.5d0 * a(i, j)
      end do
    end do
  end subroutine

  ! The middle row's total, printed: I/O inside a kernel, which replay refuses.
  subroutine report(step)
    integer, intent(in) :: step
    integer :: i
    real(8) :: s
    s = 0d0
    do i = 1, nx
      s = s + t(i, ny / 2)
    end do
    print '(a,i6,f16.6)', 'step', step, s
  end subroutine

  real(8) function norm()
    norm = field_norm(t, nx, ny)
  end function

  ! A row sum C calls back into (bind(c): the name is row_sum).
  real(c_double) function row_sum(a, m) bind(c, name="row_sum")
    integer(c_int), value :: m
    real(c_double), intent(in) :: a(m)
    integer :: i
    row_sum = 0d0
    do i = 1, m
      row_sum = row_sum + a(i) * a(i)
    end do
  end function
end module fields
