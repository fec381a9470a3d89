! A plain Fortran MPI-IO program: the MPI's Fortran bindings call the C entry points, and Open
! MPI's call PMPI_File_* (MPICH's call MPI_File_*), so a shim that defined only MPI_File_*
! would never see this program's files. Each process writes a block of integers with
! MPI_File_write_at and a second with MPI_File_write_at_all, then reads another process's
! blocks back (read_at, read_at_all, and through an MPI_INTEGER view with seek and read,
! whose status must count the integers). MPI_File_get_info must report tessera_method, which
! only the shim sets; run.sh then checks with `tessera stat` that the file is in Tessera with
! the size written. Usage: fortran_io FILE (4 processes).
program fortran_io
    use mpi
    implicit none
    integer, parameter :: n = 1024
    integer :: ierr, rank, nprocs, fh, other, i, count, info
    logical :: flag
    integer :: status(MPI_STATUS_SIZE)
    integer :: block(n), back(n)
    integer(kind=MPI_OFFSET_KIND) :: offset, size, expected
    character(len=512) :: name
    character(len=MPI_MAX_INFO_VAL) :: value

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
    if (command_argument_count() /= 1) call fail('usage: fortran_io FILE')
    call get_command_argument(1, name)

    call MPI_File_open(MPI_COMM_WORLD, trim(name), MPI_MODE_CREATE + MPI_MODE_RDWR, &
                       MPI_INFO_NULL, fh, ierr)
    call check(ierr, 'MPI_File_open')
    call MPI_File_get_info(fh, info, ierr)
    call check(ierr, 'MPI_File_get_info')
    call MPI_Info_get(info, 'tessera_method', MPI_MAX_INFO_VAL, value, flag, ierr)
    if (.not. flag) call fail('get_info has no tessera_method: the shim did not open ' // trim(name))
    call MPI_Info_free(info, ierr)

    ! Block one: independent, at the process's offset.
    do i = 1, n
        block(i) = rank * 100000 + i
    end do
    offset = int(rank, MPI_OFFSET_KIND) * n * 4
    call MPI_File_write_at(fh, offset, block, n, MPI_INTEGER, status, ierr)
    call check(ierr, 'MPI_File_write_at')
    ! Block two: collective, after every process's first block.
    do i = 1, n
        block(i) = -(rank * 100000 + i)
    end do
    offset = int(nprocs + rank, MPI_OFFSET_KIND) * n * 4
    call MPI_File_write_at_all(fh, offset, block, n, MPI_INTEGER, status, ierr)
    call check(ierr, 'MPI_File_write_at_all')
    call MPI_File_sync(fh, ierr)
    call check(ierr, 'MPI_File_sync')
    call MPI_Barrier(MPI_COMM_WORLD, ierr)

    call MPI_File_get_size(fh, size, ierr)
    call check(ierr, 'MPI_File_get_size')
    expected = int(2 * nprocs, MPI_OFFSET_KIND) * n * 4
    if (size /= expected) call fail('the file size is not 2 blocks per process')

    ! Another process's blocks.
    other = mod(rank + 1, nprocs)
    offset = int(other, MPI_OFFSET_KIND) * n * 4
    back = 0
    call MPI_File_read_at(fh, offset, back, n, MPI_INTEGER, status, ierr)
    call check(ierr, 'MPI_File_read_at')
    do i = 1, n
        if (back(i) /= other * 100000 + i) call fail('read_at returned a wrong integer')
    end do
    offset = int(nprocs + other, MPI_OFFSET_KIND) * n * 4
    back = 0
    call MPI_File_read_at_all(fh, offset, back, n, MPI_INTEGER, status, ierr)
    call check(ierr, 'MPI_File_read_at_all')
    do i = 1, n
        if (back(i) /= -(other * 100000 + i)) call fail('read_at_all returned a wrong integer')
    end do

    ! Through a view of integers: seek to the other process's first block and read it.
    offset = 0
    call MPI_File_set_view(fh, offset, MPI_INTEGER, MPI_INTEGER, 'native', MPI_INFO_NULL, ierr)
    call check(ierr, 'MPI_File_set_view')
    offset = int(other, MPI_OFFSET_KIND) * n
    call MPI_File_seek(fh, offset, MPI_SEEK_SET, ierr)
    call check(ierr, 'MPI_File_seek')
    back = 0
    call MPI_File_read(fh, back, n, MPI_INTEGER, status, ierr)
    call check(ierr, 'MPI_File_read')
    call MPI_Get_count(status, MPI_INTEGER, count, ierr)
    if (count /= n) call fail('the status of MPI_File_read does not count the integers')
    do i = 1, n
        if (back(i) /= other * 100000 + i) call fail('read through the view: wrong integer')
    end do
    call MPI_File_get_position(fh, offset, ierr)
    if (offset /= int(other + 1, MPI_OFFSET_KIND) * n) call fail('the pointer did not advance')

    call MPI_File_close(fh, ierr)
    call check(ierr, 'MPI_File_close')
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        print '(a)', 'ok fortran: write_at, write_at_all, read_at, read_at_all, seek and read ' // &
            'through a view (status counted), get_size, get_info on ' // trim(name)
    end if
    call MPI_Finalize(ierr)

contains

    subroutine check(code, what)
        integer, intent(in) :: code
        character(len=*), intent(in) :: what
        character(len=MPI_MAX_ERROR_STRING) :: text
        integer :: length, e
        if (code /= MPI_SUCCESS) then
            call MPI_Error_string(code, text, length, e)
            call fail(what // ' failed: ' // text(1:length))
        end if
    end subroutine check

    subroutine fail(message)
        character(len=*), intent(in) :: message
        integer :: e
        write (0, '(a,i0,a,a)') 'rank ', rank, ': failed: ', message
        call MPI_Abort(MPI_COMM_WORLD, 1, e)
        stop 1
    end subroutine fail
end program fortran_io
