#!/usr/bin/env python3
"""Redis CPU of the reservation with the lease on the server's clock (the CLOCK+RESERVE
script of src/store/redis/scripts.rs, read from the source) against the plain
`SET k v NX GET PX` it replaced, from INFO commandstats (usec per call), fresh keys and a
replayed key. Usage: python3 bench/redis_clock_cost.py (starts its own redis-server on
port 6391)."""
import os
import re
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = open(os.path.join(ROOT, 'src/store/redis/scripts.rs')).read()
def const(name):
    return re.search(r'const '+name+r': &str = r#?"(.*?)"#?;',src,re.S).group(1)
reserve=const('CLOCK')+const('RESERVE')
port=6391
p=subprocess.Popen(['redis-server','--port',str(port),'--save','','--appendonly','no'],stdout=subprocess.DEVNULL)
time.sleep(0.5)
def cli(*a): return subprocess.run(['redis-cli','-p',str(port)]+list(a),capture_output=True,text=True).stdout.strip()
sha=cli('SCRIPT','LOAD',reserve)
meta='\n{"route":"charge","scope":"","key":"charge:inv_1","fingerprint":"'+'0'*64+'","credentials":"'+'0'*64+'","attempt":1,"created_at_ms":1,"expires_at_ms":1764000000000,"status":null,"headers":[],"body_stored":false,"sent_at_ms":1764000000000}\n'
rec='P'+'a'*32+meta
done='C'+'a'*32+meta.replace('"status":null','"status":201').replace('false','true')+'{"id":"ch_1","amount":100}'
N=200000
def run(label,args):
    cli('CONFIG','RESETSTAT')
    subprocess.run(['redis-benchmark','-p',str(port),'-n',str(N),'-c','4']+args,capture_output=True)
    for line in cli('INFO','commandstats').splitlines():
        if line.startswith('cmdstat_') and ('calls='+str(N)) in line or 'calls=2000' in line:
            print(label, line)
run('fresh script', ['-r','100000000','EVALSHA',sha,'1','k:__rand_int__',rec,'86400000','10000'])
run('fresh plain SET NX GET PX', ['-r','100000000','SET','p:__rand_int__',rec,'NX','GET','PX','86400000'])
cli('SET','same',done); cli('SET','plain',done)
run('replay script', ['EVALSHA',sha,'1','same',rec,'86400000','10000'])
run('replay plain SET NX GET', ['SET','plain',rec,'NX','GET','PX','86400000'])
p.terminate()
