! fheat: 2-D heat diffusion in Fortran with a C norm.  ./fheat [n] [steps]
program fheat
  use fields
  implicit none
  real(8), allocatable :: x(:), s(:,:)
  real(8) :: w, acc, before, after, tmax
  common /rlxpar/ w, acc
  integer :: n, steps, it
  character(len=32) :: arg

  n = 256; steps = 200
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg); read(arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg); read(arg, *) steps
  end if
  call setup(n, n)
  allocate(x(4 * n), s(n, n))
  x = 1d0; x(1) = 5d0; w = 0.8d0; acc = 0d0; s = 0d0
  before = norm()
  do it = 1, steps
    call diffuse(0.2d0)
    call smooth(t, s)
    call blur(s, tn)
    call relax(size(x), x)
    if (mod(it, 100) == 0) call report(it)
  end do
  after = norm()
  tmax = maxval(t)
  print '(a,3f18.6)', 'norm before/after, acc:', before, after, acc
  ! the maximum principle: no point is hotter than the hottest wall
  if (tmax > 100d0 + 1d-9 .or. after <= 0d0 .or. acc <= 0d0) then
    print *, 'check failed'
    stop 1
  end if
  print *, 'check passed'
end program fheat
